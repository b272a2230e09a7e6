package xds_test

import (
	"testing"
	"time"

	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	lds = xds.ListenerType
	rds = xds.RouteType
	cds = xds.ClusterType
	eds = xds.EndpointType
)

// otherType is a type a test of typeURL can use for barriers.
func otherType(typeURL string) string {
	if typeURL == lds {
		return eds
	}
	return lds
}

// waitFor waits (bounded) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(rawRecvTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, rawRecvTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSotWInitialResponseAndACK(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 2, "api": 1}), xds.Config{})
	for _, tc := range []struct {
		typ  string
		want proto.Message
	}{
		{lds, &v3listenerpb.Listener{}},
		{rds, &v3routepb.RouteConfiguration{}},
		{cds, &v3clusterpb.Cluster{}},
		{eds, &v3endpointpb.ClusterLoadAssignment{}},
	} {
		t.Run(shortURL(tc.typ), func(t *testing.T) {
			c := newSotwClient(t, srv.conn)
			c.subscribe(tc.typ, "web")
			resp := c.recvType(tc.typ)
			res := sotwResources(t, resp)
			if got, want := sotwNames(t, resp), []string{"web"}; !cmp.Equal(got, want) {
				t.Fatalf("resources = %v, want %v", got, want)
			}
			if got, want := res["web"].ProtoReflect().Descriptor().FullName(), tc.want.ProtoReflect().Descriptor().FullName(); got != want {
				t.Errorf("resource type = %s, want %s", got, want)
			}
			if tc.typ == eds {
				if got := endpointCount(res["web"]); got != 2 {
					t.Errorf("endpoints = %d, want 2", got)
				}
			}
			// An ACK is not answered.
			c.ack(resp)
			c.barrier(otherType(tc.typ))
		})
	}
}

// An endpoint change re-sends EDS only: the listener, route and cluster
// do not depend on endpoints, and their unchanged content is suppressed.
func TestSotWEndpointChangeSendsOnlyEDS(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{})
	c := newSotwClient(t, srv.conn)
	versions := map[string]string{}
	for _, typ := range []string{lds, rds, cds, eds} {
		c.subscribe(typ, "web")
		resp := c.recvType(typ)
		versions[typ] = resp.GetVersionInfo()
		c.ack(resp)
	}
	suppressed := map[string]float64{}
	for _, typ := range []string{lds, rds, cds} {
		suppressed[typ] = srv.metric(t, "spillway_xds_pushes_suppressed_total", "type", shortURL(typ))
	}

	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	// The server evaluates LDS, RDS, CDS, then EDS for a change: had it
	// sent any of the first three, it would arrive before EDS.
	resp := c.recvType(eds)
	if resp.GetVersionInfo() == versions[eds] {
		t.Errorf("EDS version after a change = %s, the same as before", resp.GetVersionInfo())
	}
	if got := endpointCount(sotwResources(t, resp)["web"]); got != 2 {
		t.Errorf("endpoints = %d, want 2", got)
	}
	for _, typ := range []string{lds, rds, cds} {
		if got := srv.metric(t, "spillway_xds_pushes_suppressed_total", "type", shortURL(typ)); got <= suppressed[typ] {
			t.Errorf("%s suppressed pushes = %v, want > %v", shortURL(typ), got, suppressed[typ])
		}
	}
	c.ack(resp)
	c.expectNone(rawQuiet)
}

func TestSotWSubscribeUnsubscribe(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1, "api": 1}), xds.Config{})
	c := newSotwClient(t, srv.conn)
	steps := []struct {
		names []string
		want  []string
	}{
		{[]string{"web"}, []string{"web"}},
		{[]string{"web", "api"}, []string{"api", "web"}},
		{[]string{"api"}, []string{"api"}},
	}
	for _, s := range steps {
		c.subscribe(eds, s.names...)
		resp := c.recvType(eds)
		if got := sotwNames(t, resp); !cmp.Equal(got, s.want) {
			t.Fatalf("subscribe %v: resources = %v, want %v", s.names, got, s.want)
		}
		c.ack(resp)
	}
	// web is no longer subscribed: its changes are not sent.
	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	c.barrier(lds)
	srv.apply(t, registry.Upsert("api", rawEndpoint(2, 0)))
	resp := c.recvType(eds)
	res := sotwResources(t, resp)
	if got := sotwNames(t, resp); !cmp.Equal(got, []string{"api"}) {
		t.Fatalf("after an api change: resources = %v, want [api]", got)
	}
	if got := endpointCount(res["api"]); got != 2 {
		t.Errorf("api endpoints = %d, want 2", got)
	}
}

// A name that does not exist gets a response without it (for LDS and CDS
// that tells the client it does not exist), and the resource is sent when
// the service appears.
func TestSotWDoesNotExist(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{})
	for i, typ := range []string{lds, rds, cds, eds} {
		t.Run(shortURL(typ), func(t *testing.T) {
			c := newSotwClient(t, srv.conn)
			name := []string{"nope-l", "nope-r", "nope-c", "nope-e"}[i]
			c.subscribe(typ, name)
			resp := c.recvType(typ)
			if n := len(resp.GetResources()); n != 0 {
				t.Fatalf("resources for %s = %v, want none", name, sotwNames(t, resp))
			}
			c.ack(resp)
			srv.apply(t, registry.Upsert(name, rawEndpoint(1, 0)))
			resp = c.recvType(typ)
			if got := sotwNames(t, resp); !cmp.Equal(got, []string{name}) {
				t.Fatalf("after %s appeared: resources = %v, want [%s]", name, got, name)
			}
		})
	}
}

// A wildcard lists every service; a service forgotten by the store drops
// out of the next response.
func TestSotWRemoval(t *testing.T) {
	for _, tc := range []struct {
		name       string
		typ        string
		names      []string
		before     []string
		after      []string
		barrierTyp string
	}{
		{"LDS-wildcard-empty", lds, nil, []string{"api", "web"}, []string{"web"}, eds},
		{"CDS-wildcard-star", cds, []string{"*"}, []string{"api", "web"}, []string{"web"}, eds},
		{"EDS-named", eds, []string{"api", "web"}, []string{"api", "web"}, []string{"web"}, lds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1, "api": 1}), xds.Config{})
			c := newSotwClient(t, srv.conn)
			c.subscribe(tc.typ, tc.names...)
			resp := c.recvType(tc.typ)
			if got := sotwNames(t, resp); !cmp.Equal(got, tc.before) {
				t.Fatalf("resources = %v, want %v", got, tc.before)
			}
			c.ack(resp)
			srv.apply(t, registry.Remove("api", "ep-1", registry.SourceStatic), registry.Forget("api"))
			resp = c.recvType(tc.typ)
			if got := sotwNames(t, resp); !cmp.Equal(got, tc.after) {
				t.Fatalf("after api was forgotten: resources = %v, want %v", got, tc.after)
			}
			c.ack(resp)
			c.barrier(tc.barrierTyp)
		})
	}
}

// A request carrying an older nonce is ignored, even one that changes the
// subscription; the same change with the current nonce is answered.
func TestSotWStaleNonceIgnored(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1, "api": 1}), xds.Config{})
	c := newSotwClient(t, srv.conn)
	c.subscribe(eds, "web")
	r1 := c.recvType(eds)
	c.ack(r1)
	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	r2 := c.recvType(eds)

	c.send(&v3discoverypb.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"web", "api"},
		VersionInfo: r1.GetVersionInfo(), ResponseNonce: r1.GetNonce()})
	srv.waitMetric(t, 1, "spillway_xds_stale_requests_total", "type", "EDS")
	c.barrier(lds)

	c.send(&v3discoverypb.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"web", "api"},
		VersionInfo: r2.GetVersionInfo(), ResponseNonce: r2.GetNonce()})
	r3 := c.recvType(eds)
	if got := sotwNames(t, r3); !cmp.Equal(got, []string{"api", "web"}) {
		t.Fatalf("resources = %v, want [api web]", got)
	}
	if r3.GetNonce() == r2.GetNonce() || r2.GetNonce() == r1.GetNonce() {
		t.Errorf("nonces %s, %s, %s repeat", r1.GetNonce(), r2.GetNonce(), r3.GetNonce())
	}
}

// A request for a type the server does not serve is ignored, and the
// stream keeps working.
func TestSotWUnknownTypeIgnored(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{})
	c := newSotwClient(t, srv.conn)
	c.send(&v3discoverypb.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.foo.v3.Unknown", ResourceNames: []string{"web"}})
	c.send(&v3discoverypb.DiscoveryRequest{TypeUrl: "", ResourceNames: []string{"web"}})
	c.barrier(lds)
	c.subscribe(eds, "web")
	if got := sotwNames(t, c.recvType(eds)); !cmp.Equal(got, []string{"web"}) {
		t.Fatalf("resources = %v, want [web]", got)
	}
}

// A NACK is not answered with the version it rejected, not even by the
// periodic resync; a later content change is sent.
func TestSotWNACK(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{Resync: 200 * time.Millisecond})
	c := newSotwClient(t, srv.conn)
	c.subscribe(eds, "web")
	r1 := c.recvType(eds)
	c.ack(r1)
	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	r2 := c.recvType(eds)
	c.nack(r2, "endpoint ep-2 is not acceptable")
	srv.waitMetric(t, 1, "spillway_xds_nacks_total", "type", "EDS", "service", "web")

	// Two resync cycles evaluate web again and suppress the rejected version.
	s0 := srv.metric(t, "spillway_xds_pushes_suppressed_total", "type", "EDS")
	srv.waitMetric(t, s0+2, "spillway_xds_pushes_suppressed_total", "type", "EDS")
	c.barrier(lds)

	srv.apply(t, registry.Upsert("web", rawEndpoint(3, 0)))
	r3 := c.recvType(eds)
	if v := r3.GetVersionInfo(); v == r2.GetVersionInfo() || v == r1.GetVersionInfo() {
		t.Fatalf("version after a change = %s, want a new one (r1 %s, r2 %s)", v, r1.GetVersionInfo(), r2.GetVersionInfo())
	}
	if got := endpointCount(sotwResources(t, r3)["web"]); got != 3 {
		t.Errorf("endpoints = %d, want 3", got)
	}
}

// A client that reconnects gets the current state, whatever version and
// nonce it carries over from its previous stream.
func TestSotWReconnect(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepNonce bool
	}{
		{"version-only", false},
		// A nonce is stale only once a newer one was sent on the stream;
		// the new stream has sent none (go-control-plane checks nonces
		// only once it has answered the type).
		{"old-stream-nonce", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{})
			c := newSotwClient(t, srv.conn)
			c.subscribe(eds, "web")
			r1 := c.recvType(eds)
			c.ack(r1)
			waitFor(t, "one sotw stream", func() bool { return srv.metric(t, "spillway_xds_streams", "protocol", "sotw") == 1 })
			c.close()
			waitFor(t, "no sotw stream", func() bool { return srv.metric(t, "spillway_xds_streams", "protocol", "sotw") == 0 })

			srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
			c = newSotwClient(t, srv.conn)
			req := &v3discoverypb.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"web"}, VersionInfo: r1.GetVersionInfo()}
			if tc.keepNonce {
				req.ResponseNonce = r1.GetNonce()
			}
			c.names[eds] = []string{"web"}
			c.send(req)
			r2 := c.recvType(eds)
			if got := endpointCount(sotwResources(t, r2)["web"]); got != 2 {
				t.Errorf("endpoints after reconnect = %d, want 2", got)
			}
			if r2.GetVersionInfo() == r1.GetVersionInfo() {
				t.Errorf("version after reconnect = %s, the same as before the change", r2.GetVersionInfo())
			}
		})
	}
}

func TestDeltaSubscribeACKChange(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1, "api": 1}), xds.Config{})
	c := newDeltaClient(t, srv.conn)
	c.subscribe(eds, "web", "api")
	r1 := c.recvType(eds)
	v1 := deltaVersions(r1)
	if len(v1) != 2 || v1["web"] == "" || v1["api"] == "" {
		t.Fatalf("resources = %v, want web and api with versions", v1)
	}
	for _, r := range r1.GetResources() {
		if name, m := decodeResource(t, r.GetResource()); name != r.GetName() || endpointCount(m) != 1 {
			t.Errorf("resource %s decodes as %s with %d endpoints, want 1", r.GetName(), name, endpointCount(m))
		}
	}
	c.ack(r1)
	c.barrier(lds)

	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	r2 := c.recvType(eds)
	v2 := deltaVersions(r2)
	if len(v2) != 1 || v2["web"] == "" || v2["web"] == v1["web"] || len(r2.GetRemovedResources()) != 0 {
		t.Fatalf("after a web change: resources %v, removed %v; want web alone at a new version (was %s)", v2, r2.GetRemovedResources(), v1["web"])
	}
	if got := endpointCount(mustDecode(t, r2.GetResources()[0])); got != 2 {
		t.Errorf("web endpoints = %d, want 2", got)
	}
	c.ack(r2)
	c.barrier(lds)
}

func mustDecode(t *testing.T, r *v3discoverypb.Resource) proto.Message {
	t.Helper()
	_, m := decodeResource(t, r.GetResource())
	return m
}

// A name that does not exist comes back in removed_resources; it is sent
// when the service appears, and removed again when it is forgotten.
func TestDeltaDoesNotExistAndRemoval(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{})
	c := newDeltaClient(t, srv.conn)
	c.subscribe(eds, "web", "nope")
	r := c.recvType(eds)
	if got := deltaVersions(r); len(got) != 1 || got["web"] == "" {
		t.Fatalf("resources = %v, want web", got)
	}
	if got := r.GetRemovedResources(); !cmp.Equal(got, []string{"nope"}) {
		t.Fatalf("removed = %v, want [nope]", got)
	}
	c.ack(r)
	c.barrier(lds) // nope is not told again

	srv.apply(t, registry.Upsert("nope", rawEndpoint(1, 0)))
	r = c.recvType(eds)
	if got := deltaVersions(r); len(got) != 1 || got["nope"] == "" || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("after nope appeared: resources %v, removed %v; want nope", got, r.GetRemovedResources())
	}
	c.ack(r)

	srv.apply(t, registry.Remove("nope", "ep-1", registry.SourceStatic), registry.Forget("nope"))
	r = c.recvType(eds)
	if len(r.GetResources()) != 0 || !cmp.Equal(r.GetRemovedResources(), []string{"nope"}) {
		t.Fatalf("after nope was forgotten: resources %v, removed %v; want removed [nope]", deltaVersions(r), r.GetRemovedResources())
	}
	c.ack(r)
	c.barrier(lds)
}

// After an unsubscribe the name's changes are not sent.
func TestDeltaUnsubscribe(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1, "api": 1}), xds.Config{})
	c := newDeltaClient(t, srv.conn)
	c.subscribe(eds, "web", "api")
	c.ack(c.recvType(eds))
	c.unsubscribe(eds, "api")
	c.barrier(lds)
	srv.apply(t, registry.Upsert("api", rawEndpoint(2, 0)))
	c.barrier(lds)
	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	r := c.recvType(eds)
	if got := deltaVersions(r); len(got) != 1 || got["web"] == "" {
		t.Fatalf("resources = %v, want web alone", got)
	}
}

// initial_resource_versions spare a reconnecting client what it holds.
func TestDeltaReconnectInitialVersions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  func(current string) string
		change   bool // the store changes while the client is away
		wantSend bool
	}{
		{"current-version", func(v string) string { return v }, false, false},
		{"old-version", func(string) string { return "old" }, false, true},
		{"changed-while-away", func(v string) string { return v }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{})
			c := newDeltaClient(t, srv.conn)
			c.subscribe(eds, "web")
			r1 := c.recvType(eds)
			c.ack(r1)
			c.close()
			if tc.change {
				srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
			}

			pushes := srv.metric(t, "spillway_xds_pushes_total", "type", "EDS")
			c = newDeltaClient(t, srv.conn)
			c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"web"},
				InitialResourceVersions: map[string]string{"web": tc.version(deltaVersions(r1)["web"])}})
			if !tc.wantSend {
				// An empty answer, at once: Envoy waits for one.
				r := c.recvType(eds)
				if len(r.GetResources()) != 0 || len(r.GetRemovedResources()) != 0 {
					t.Fatalf("reconnect holding everything current: resources %v, removed %v; want an empty response", deltaVersions(r), r.GetRemovedResources())
				}
				c.ack(r)
				// It is counted as sent; nothing more is owed. (Counting
				// suppressions instead races the server's start: the first
				// dispatch of Run may reach this stream after its answer,
				// find nothing new and be suppressed, as it should.)
				// The count follows the Send on the stream's push loop;
				// the barrier's answer comes from the same loop after it.
				c.barrier(lds)
				if got := srv.metric(t, "spillway_xds_pushes_total", "type", "EDS"); got != pushes+1 {
					t.Errorf("EDS pushes = %v, want %v (the empty first answer is counted as sent)", got, pushes+1)
				}
				return
			}
			r2 := c.recvType(eds)
			v := deltaVersions(r2)["web"]
			if v == "" {
				t.Fatalf("resources = %v, want web", deltaVersions(r2))
			}
			if want := 1 + btoi(tc.change); endpointCount(mustDecode(t, r2.GetResources()[0])) != want {
				t.Errorf("endpoints = %d, want %d", endpointCount(mustDecode(t, r2.GetResources()[0])), want)
			}
			if tc.change == (v == deltaVersions(r1)["web"]) {
				t.Errorf("version %s (before: %s), changed = %v", v, deltaVersions(r1)["web"], tc.change)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A first CDS request naming nothing is a wildcard: it gets every cluster;
// a new service is sent alone, and a forgotten one is removed.
func TestDeltaWildcard(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1, "api": 1}), xds.Config{})
	c := newDeltaClient(t, srv.conn)
	c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: cds})
	r := c.recvType(cds)
	if got := deltaVersions(r); len(got) != 2 || got["web"] == "" || got["api"] == "" {
		t.Fatalf("wildcard resources = %v, want api and web", got)
	}
	c.ack(r)

	srv.apply(t, registry.Upsert("db", rawEndpoint(1, 0)))
	r = c.recvType(cds)
	if got := deltaVersions(r); len(got) != 1 || got["db"] == "" || len(r.GetRemovedResources()) != 0 {
		t.Fatalf("after db appeared: resources %v, removed %v; want db alone", got, r.GetRemovedResources())
	}
	c.ack(r)

	// An endpoint change does not touch the clusters.
	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	c.barrier(lds)

	srv.apply(t, registry.Remove("db", "ep-1", registry.SourceStatic), registry.Forget("db"))
	r = c.recvType(cds)
	if len(r.GetResources()) != 0 || !cmp.Equal(r.GetRemovedResources(), []string{"db"}) {
		t.Fatalf("after db was forgotten: resources %v, removed %v; want removed [db]", deltaVersions(r), r.GetRemovedResources())
	}
	c.ack(r)
	c.barrier(lds)
}

// A NACKed resource is not sent again at the same version, not even by
// the periodic resync; a later change is sent.
func TestDeltaNACK(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{Resync: 200 * time.Millisecond})
	c := newDeltaClient(t, srv.conn)
	c.subscribe(eds, "web")
	r1 := c.recvType(eds)
	c.ack(r1)
	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	r2 := c.recvType(eds)
	c.nack(r2, "endpoint ep-2 is not acceptable")
	srv.waitMetric(t, 1, "spillway_xds_nacks_total", "type", "EDS", "service", "web")

	s0 := srv.metric(t, "spillway_xds_pushes_suppressed_total", "type", "EDS")
	srv.waitMetric(t, s0+2, "spillway_xds_pushes_suppressed_total", "type", "EDS")
	c.barrier(lds)

	srv.apply(t, registry.Upsert("web", rawEndpoint(3, 0)))
	r3 := c.recvType(eds)
	v := deltaVersions(r3)["web"]
	if v == "" || v == deltaVersions(r2)["web"] || v == deltaVersions(r1)["web"] {
		t.Fatalf("after a change: resources %v, want web at a new version", deltaVersions(r3))
	}
	if got := endpointCount(mustDecode(t, r3.GetResources()[0])); got != 3 {
		t.Errorf("endpoints = %d, want 3", got)
	}
}

// ClientServices names each connected client service once, from the
// node.cluster of its streams, and forgets it once they are gone.
func TestClientServices(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{})
	a, b := newSotwClient(t, srv.conn), newSotwClient(t, srv.conn)
	for _, c := range []*sotwClient{a, b} {
		c.subscribe(eds, "web")
		c.ack(c.recvType(eds))
	}
	if diff := cmp.Diff([]string{"tests"}, srv.x.ClientServices()); diff != "" {
		t.Errorf("ClientServices with two streams of cluster tests (-want +got):\n%s", diff)
	}
	a.close()
	b.close()
	waitFor(t, "no client service once both streams are closed", func() bool { return len(srv.x.ClientServices()) == 0 })
}
