package kubernetes

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/spillway/spillway/registry"
)

const (
	v4 = discoveryv1.AddressTypeIPv4
	v6 = discoveryv1.AddressTypeIPv6
)

// TestTwoClusters follows one service through two fake clusters (real
// informers): creates, updates, deletes, terminating endpoints, zones from
// node labels, dual stack, and the merge of one Service seen in both.
func TestTwoClusters(t *testing.T) {
	webPorts := []discoveryv1.EndpointPort{port("grpc", 8080, corev1.ProtocolTCP), port("metrics", 9090, "")}
	apiPorts := []discoveryv1.EndpointPort{port("", 9000, corev1.ProtocolTCP), port("dns", 53, corev1.ProtocolUDP), port("sctp", 7777, corev1.ProtocolSCTP)}
	orphan := eslice("prod", "x", "orphan", v4, grpcPort, ep("o-1", "10.0.9.1", "n1", ready))
	delete(orphan.Labels, discoveryv1.LabelServiceName)
	fqdn := eslice("prod", "ext", "ext-1", discoveryv1.AddressTypeFQDN, grpcPort, ep("ext", "db.example.com", "", ready))
	east := newFakeCluster("east",
		node("n1", "us-east1", "us-east1-a"), node("n2", "us-east1", "us-east1-b"),
		eslice("prod", "web", "web-abc", v4, webPorts,
			ep("web-1", "10.0.0.1", "n1", ready),
			withZone(ep("web-2", "10.0.0.2", "n2", ready), "us-east1-c")),
		eslice("prod", "api", "api-1", v4, apiPorts, ep("api-1", "10.0.1.1", "n1", ready)),
		orphan, fqdn,
	)
	west := newFakeCluster("west",
		node("w1", "us-west1", "us-west1-a"),
		eslice("prod", "web", "web-xyz", v4, grpcPort, ep("web-1", "10.1.0.1", "w1", ready)),
	)
	h := start(t, harnessOpts{}, east, west)

	const (
		webPortsV = "grpc=8080/tcp,metrics=9090/tcp"
		grpcV     = "grpc=8080/tcp"
	)
	web1East := view{"web-1-east", "10.0.0.1", webPortsV, "us-east1-a", "us-east1", registry.Healthy}
	web2East := view{"web-2-east", "10.0.0.2", webPortsV, "us-east1-c", "us-east1", registry.Healthy}
	web1West := view{"web-1-west", "10.1.0.1", grpcV, "us-west1-a", "us-west1", registry.Healthy}
	api1 := view{"api-1-east", "10.0.1.1", "dns=53/udp,grpc=9000/tcp", "us-east1-a", "us-east1", registry.Healthy}
	h.expect(t, "initial sync", map[string][]view{
		"web.prod": {web1East, web1West, web2East},
		"api.prod": {api1},
		"ext.prod": {}, // an FQDN-only Service is known, with nothing to serve
	}, "x.prod")
	if svc, _ := h.store.Snapshot().Service("web.prod"); !svc.Endpoints[0].Registered.IsZero() {
		t.Errorf("initial endpoint Registered = %v, want zero (present before this sync)", svc.Endpoints[0].Registered)
	}

	east.create(t, eslice("prod", "web", "web-def", v4, grpcPort, ep("web-3", "10.0.0.3", "n2", ready)))
	east.create(t, eslice("prod", "web", "web-v6", v6, grpcPort, ep("web-1", "2001:db8::1", "n1", ready)))
	web3East := view{"web-3-east", "10.0.0.3", grpcV, "us-east1-b", "us-east1", registry.Healthy}
	web1V6 := view{"web-1-v6-east", "2001:db8::1", grpcV, "us-east1-a", "us-east1", registry.Healthy}
	h.expect(t, "second slice and an IPv6 slice", map[string][]view{
		"web.prod": {web1East, web1V6, web1West, web2East, web3East},
	})
	svc, _ := h.store.Snapshot().Service("web.prod")
	if e, _ := svc.Endpoint("web-3-east"); e.Registered.IsZero() {
		t.Error("endpoint added after the sync has a zero Registered, want the time it was seen")
	}

	s := east.get(t, "prod", "web-abc")
	s.Endpoints[0] = ep("web-1", "10.0.0.1", "n1", notReady)
	s.Endpoints[1] = withZone(ep("web-2", "10.0.0.2", "n2", draining), "us-east1-c")
	east.update(t, s)
	web2Draining := web2East
	web2Draining.Health = registry.Draining
	h.expect(t, "not ready is removed, terminating and serving is draining", map[string][]view{
		"web.prod": {web1V6, web1West, web2Draining, web3East},
	})

	s = east.get(t, "prod", "web-abc")
	s.Endpoints[1] = withZone(ep("web-2", "10.0.0.2", "n2", gone), "us-east1-c")
	east.update(t, s)
	h.expect(t, "terminating and not serving is removed", map[string][]view{
		"web.prod": {web1V6, web1West, web3East},
	})

	n1 := node("n1", "us-east1", "us-east1-z")
	east.updateNode(t, n1)
	web1V6.Zone, api1.Zone = "us-east1-z", "us-east1-z"
	h.expect(t, "zone follows the node label", map[string][]view{
		"web.prod": {web1V6, web1West, web3East},
		"api.prod": {api1},
	})

	east.remove(t, "prod", "web-def")
	h.expect(t, "deleting a slice removes only its endpoints", map[string][]view{
		"web.prod": {web1V6, web1West},
	})

	east.remove(t, "prod", "web-abc")
	east.remove(t, "prod", "web-v6")
	h.expect(t, "the service is gone from one cluster only", map[string][]view{
		"web.prod": {web1West},
	})

	west.remove(t, "prod", "web-xyz")
	h.expect(t, "gone from both clusters: forgotten", map[string][]view{"api.prod": {api1}}, "web.prod")

	if got := h.gauge(h.src.metrics.endpoints, "east"); got != 1 {
		t.Errorf("spillway_kubernetes_cluster_endpoints{east} = %v, want 1", got)
	}
	for _, name := range []string{"east", "west"} {
		if st := h.status(name); !st.Synced || st.Stale || !strings.Contains(st.String(), ": ok,") {
			t.Errorf("Status(%s) = %+v (%s), want synced and fresh", name, st, st)
		}
	}
}

// TestLabelSelectorAndNamespaces: only the listed namespaces, and only the
// slices the selector matches, reach the store.
func TestLabelSelectorAndNamespaces(t *testing.T) {
	matching := eslice("prod", "web", "web-1", v4, grpcPort, ep("web-1", "10.0.0.1", "", ready))
	matching.Labels["spillway.io/export"] = "true"
	other := eslice("prod", "db", "db-1", v4, grpcPort, ep("db-1", "10.0.0.2", "", ready))
	elsewhere := eslice("dev", "web", "web-1", v4, grpcPort, ep("web-1", "10.0.0.3", "", ready))
	elsewhere.Labels["spillway.io/export"] = "true"
	c := newFakeCluster("east", matching, other, elsewhere)
	h := start(t, harnessOpts{cfg: Config{Namespaces: []string{"prod"}, LabelSelector: "spillway.io/export=true", ServiceName: "{service}-{namespace}.k8s"}}, c)
	h.expect(t, "selected", map[string][]view{
		"web-prod.k8s": {{"web-1", "10.0.0.1", "grpc=8080/tcp", "", "", registry.Healthy}},
	}, "db-prod.k8s", "web-dev.k8s")
}

// TestInvalidServiceName: a Service whose templated name is not a valid
// service name is left out; the others are applied.
func TestInvalidServiceName(t *testing.T) {
	long := strings.Repeat("s", 40)
	c := newFakeCluster("east",
		eslice(long, long, "a", v4, grpcPort, ep("p-1", "10.0.0.1", "", ready)),
		eslice("prod", "web", "b", v4, grpcPort, ep("p-2", "10.0.0.2", "", ready)))
	h := start(t, harnessOpts{cfg: Config{ServiceName: "{service}-{namespace}"}}, c)
	h.expect(t, "valid one applied", map[string][]view{"web-prod": {{"p-2", "10.0.0.2", "grpc=8080/tcp", "", "", registry.Healthy}}})
	if n := h.store.Snapshot().Len(); n != 1 {
		t.Errorf("%d services in the store, want 1", n)
	}
}

// TestRelistWritesNothing is the flap test: relists, resyncs, updates
// that change nothing the source uses, and a full recomputation make zero
// store writes.
func TestRelistWritesNothing(t *testing.T) {
	objects := func() []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{
			eslice("prod", "web", "web-a", v4, grpcPort, ep("web-1", "10.0.0.1", "n1", ready), ep("web-2", "10.0.0.2", "n1", draining)),
			eslice("prod", "web", "web-b", v4, grpcPort, ep("web-3", "10.0.0.3", "n1", ready)),
			eslice("prod", "web", "web-c", v6, grpcPort, ep("web-1", "2001:db8::1", "n1", ready)),
			eslice("prod", "api", "api-a", v4, grpcPort, ep("api-1", "10.0.1.1", "n1", ready)),
		}
	}
	fakes := func() (*fakeCluster, *fakeCluster) {
		var east, west []runtime.Object
		east = append(east, node("n1", "r", "z-a"))
		west = append(west, node("n1", "r", "z-b"))
		for _, s := range objects() {
			east = append(east, s)
			west = append(west, s)
		}
		return newFakeCluster("east", east...), newFakeCluster("west", west...)
	}
	nSlices, nNodes := float64(len(objects())), 1.0

	t.Run("resync_and_expired_watch", func(t *testing.T) {
		east, west := fakes()
		h := start(t, harnessOpts{cfg: Config{Resync: time.Second}}, east, west)
		h.quiet(t)
		w0 := h.store.Writes()
		base := h.events("east", "endpointslices", "unchanged")
		waitFor(t, "two resyncs", func() bool {
			return h.events("east", "endpointslices", "unchanged") >= base+2*nSlices &&
				h.events("west", "nodes", "unchanged") >= 2*nNodes
		})
		lists := east.lists.Load()
		east.expireWatches()
		west.expireWatches()
		waitFor(t, "relists", func() bool { return east.lists.Load() >= lists+2 })
		base = h.events("east", "endpointslices", "unchanged")
		waitFor(t, "a resync after the relist", func() bool { return h.events("east", "endpointslices", "unchanged") >= base+nSlices })
		h.quiet(t)
		if got := h.store.Writes(); got != w0 {
			t.Errorf("store writes after resyncs and relists = %d, want %d (none)", got, w0)
		}
		if got := h.events("east", "endpointslices", "update"); got != 0 {
			t.Errorf("slice updates seen as changes = %v, want 0", got)
		}
	})

	t.Run("new_versions_same_content", func(t *testing.T) {
		east, west := fakes()
		h := start(t, harnessOpts{}, east, west)
		h.quiet(t)
		w0 := h.store.Writes()
		// Every object gets a new resource version but no change the
		// source uses: annotations, hints, other labels, node status.
		for _, f := range []*fakeCluster{east, west} {
			for _, o := range objects() {
				s := f.get(t, o.Namespace, o.Name)
				s.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": time.Now().Format(time.RFC3339Nano)}
				s.Labels["app.kubernetes.io/version"] = "v2"
				for i := range s.Endpoints {
					s.Endpoints[i].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z-a"}}}
					s.Endpoints[i].DeprecatedTopology = map[string]string{"x": "y"}
				}
				f.update(t, s)
			}
			n, err := f.cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
			f.updateNode(t, n)
		}
		for _, name := range []string{"east", "west"} {
			waitFor(t, "updates seen", func() bool {
				return h.events(name, "endpointslices", "unchanged") == nSlices && h.events(name, "nodes", "unchanged") == nNodes
			})
		}
		// A relist after an expired watch: then a marker change in another
		// service, applied after the relist's events, shows they are done.
		lists := east.lists.Load()
		east.expireWatches()
		waitFor(t, "relist", func() bool { return east.lists.Load() >= lists+2 })
		east.create(t, eslice("prod", "marker", "marker-a", v4, grpcPort, ep("m-1", "10.0.2.1", "", ready)))
		h.expect(t, "marker", map[string][]view{"marker.prod": {{"m-1-east", "10.0.2.1", "grpc=8080/tcp", "", "", registry.Healthy}}})
		h.quiet(t)
		if got := h.store.Writes(); got != w0+1 {
			t.Errorf("store writes = %d, want %d (only the marker)", got, w0+1)
		}
	})

	t.Run("full_recompute", func(t *testing.T) {
		east, west := fakes()
		h := start(t, harnessOpts{}, east, west)
		h.quiet(t)
		w0, a0 := h.store.Writes(), h.applies.Load()
		for _, c := range h.src.clusters {
			c.requestAll()
		}
		h.quiet(t)
		if got := h.store.Writes(); got != w0 {
			t.Errorf("store writes after recomputing every service = %d, want %d", got, w0)
		}
		if got := h.applies.Load(); got != a0 {
			t.Errorf("applies after recomputing every service = %d, want %d (no empty batch either)", got, a0)
		}
	})
}

// TestRollingUpdate replaces 10 pods one at a time, the way a Deployment
// (maxSurge 1, maxUnavailable 0) and the EndpointSlice controller do: the
// new pod joins another slice not ready, becomes ready, then the old one
// terminates, stops serving and leaves its slice, which is deleted when
// empty. After every store write the service has a healthy endpoint.
func TestRollingUpdate(t *testing.T) {
	for _, paced := range []bool{true, false} {
		name := "paced"
		if !paced {
			name = "burst"
		}
		t.Run(name, func(t *testing.T) {
			const n = 10
			var old []discoveryv1.Endpoint
			for i := range n {
				old = append(old, ep(fmt.Sprintf("app-old-%d", i), fmt.Sprintf("10.0.0.%d", i+1), "", ready))
			}
			c := newFakeCluster("east", eslice("prod", "app", "app-a", v4, grpcPort, old...))

			var mu sync.Mutex
			var writes, minHealthy int
			minHealthy = n
			h := start(t, harnessOpts{afterApply: func(s *registry.Store) {
				svc, ok := s.Snapshot().Service("app.prod")
				healthy := 0
				if ok {
					for _, e := range svc.Endpoints {
						if e.Health == registry.Healthy {
							healthy++
						}
					}
				}
				mu.Lock()
				writes++
				minHealthy = min(minHealthy, healthy)
				mu.Unlock()
			}}, c)
			h.expect(t, "initial", map[string][]view{"app.prod": appView(n, 0)})

			events := func() float64 {
				return h.events("east", "endpointslices", "add") + h.events("east", "endpointslices", "update") + h.events("east", "endpointslices", "delete")
			}
			// step applies one API change; paced, it waits until the
			// source has processed it, so every change is its own write.
			step := func(what string, change func()) {
				t.Helper()
				before := events()
				change()
				if paced {
					waitFor(t, what+" seen", func() bool { return events() > before })
					h.quiet(t)
				}
			}
			for i := range n {
				newEp := func(st state) discoveryv1.Endpoint {
					return ep(fmt.Sprintf("app-new-%d", i), fmt.Sprintf("10.0.1.%d", i+1), "", st)
				}
				step("new pod not ready", func() {
					if i == 0 {
						c.create(t, eslice("prod", "app", "app-b", v4, grpcPort, newEp(notReady)))
						return
					}
					s := c.get(t, "prod", "app-b")
					s.Endpoints = append(s.Endpoints, newEp(notReady))
					c.update(t, s)
				})
				step("new pod ready", func() {
					s := c.get(t, "prod", "app-b")
					s.Endpoints[i] = newEp(ready)
					c.update(t, s)
				})
				for _, st := range []state{draining, gone} {
					step("old pod terminating", func() {
						s := c.get(t, "prod", "app-a")
						s.Endpoints[0] = ep(fmt.Sprintf("app-old-%d", i), fmt.Sprintf("10.0.0.%d", i+1), "", st)
						c.update(t, s)
					})
				}
				step("old pod leaves its slice", func() {
					s := c.get(t, "prod", "app-a")
					if len(s.Endpoints) == 1 {
						c.remove(t, "prod", "app-a")
						return
					}
					s.Endpoints = s.Endpoints[1:]
					c.update(t, s)
				})
				if paced {
					h.expect(t, fmt.Sprintf("pod %d replaced", i), map[string][]view{"app.prod": appView(n, i+1)})
				}
			}
			h.expect(t, "rolled out", map[string][]view{"app.prod": appView(n, n)})
			h.quiet(t)

			// The slice controller repacks: every endpoint into a new
			// slice, then the old slice is deleted. Nothing to write.
			w0 := h.store.Writes()
			moved := c.get(t, "prod", "app-b").Endpoints
			before := events()
			c.create(t, eslice("prod", "app", "app-c", v4, grpcPort, moved...))
			c.remove(t, "prod", "app-b")
			waitFor(t, "repack seen", func() bool { return events() >= before+2 })
			h.quiet(t)
			h.expect(t, "repacked", map[string][]view{"app.prod": appView(n, n)})
			if got := h.store.Writes(); got != w0 {
				t.Errorf("repacking the slices made %d store writes, want 0", got-w0)
			}
			mu.Lock()
			defer mu.Unlock()
			if minHealthy < 1 {
				t.Errorf("a store write left app.prod with %d healthy endpoints, want at least 1 at all times", minHealthy)
			}
			if paced && writes < 3*n {
				t.Errorf("%d store writes, want at least %d: each visible step is its own write", writes, 3*n)
			}
			t.Logf("%d writes, fewest healthy endpoints after a write: %d", writes, minHealthy)
		})
	}
}

// appView is the app service with pods 0..replaced-1 new and the rest old.
func appView(n, replaced int) []view {
	var out []view
	for i := range n {
		if i < replaced {
			out = append(out, view{fmt.Sprintf("app-new-%d", i), fmt.Sprintf("10.0.1.%d", i+1), "grpc=8080/tcp", "", "", registry.Healthy})
		} else {
			out = append(out, view{fmt.Sprintf("app-old-%d", i), fmt.Sprintf("10.0.0.%d", i+1), "grpc=8080/tcp", "", "", registry.Healthy})
		}
	}
	slices.SortFunc(out, func(a, b view) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// TestStaleness: a cluster whose API server stops answering keeps its
// endpoints and is reported stale (metric, Status); when it answers again
// it is fresh and the changes it missed are applied.
func TestStaleness(t *testing.T) {
	east := newFakeCluster("east", eslice("prod", "web", "web-a", v4, grpcPort, ep("web-1", "10.0.0.1", "", ready), ep("web-2", "10.0.0.2", "", ready)))
	west := newFakeCluster("west", eslice("prod", "web", "web-x", v4, grpcPort, ep("web-1", "10.1.0.1", "", ready)))
	h := start(t, harnessOpts{}, east, west)
	all := map[string][]view{"web.prod": {
		{"web-1-east", "10.0.0.1", "grpc=8080/tcp", "", "", registry.Healthy},
		{"web-1-west", "10.1.0.1", "grpc=8080/tcp", "", "", registry.Healthy},
		{"web-2-east", "10.0.0.2", "grpc=8080/tcp", "", "", registry.Healthy},
	}}
	h.expect(t, "synced", all)

	east.setDown(true)
	waitFor(t, "east stale", func() bool { return h.status("east").Stale })
	if got := h.gauge(h.src.metrics.stale, "east"); got != 1 {
		t.Errorf("spillway_kubernetes_cluster_stale{east} = %v, want 1", got)
	}
	if got := h.gauge(h.src.metrics.stale, "west"); got != 0 {
		t.Errorf("spillway_kubernetes_cluster_stale{west} = %v, want 0", got)
	}
	st := h.status("east")
	if line := st.String(); !strings.Contains(line, "STALE") || !strings.Contains(line, "connection refused") || !strings.Contains(line, "2 endpoints") {
		t.Errorf("Status(east).String() = %q, want STALE, the error and the kept endpoints", line)
	}
	// While east is away, one of its pods goes: nobody can know yet.
	if err := east.cs.Tracker().Delete(slicesGVR, "prod", "web-a"); err != nil {
		t.Fatal(err)
	}
	if err := east.cs.Tracker().Add(eslice("prod", "web", "web-a", v4, grpcPort, ep("web-1", "10.0.0.1", "", ready))); err != nil {
		t.Fatal(err)
	}
	h.quiet(t)
	if diff := services(h.store.Snapshot(), "web.prod"); len(diff["web.prod"]) != 3 {
		t.Errorf("while east is stale the store holds %v, want its 2 last known endpoints kept", diff)
	}

	east.setDown(false)
	waitFor(t, "east fresh", func() bool { return !h.status("east").Stale })
	if got := h.gauge(h.src.metrics.stale, "east"); got != 0 {
		t.Errorf("spillway_kubernetes_cluster_stale{east} = %v after recovery, want 0", got)
	}
	h.expect(t, "the missed change applied", map[string][]view{"web.prod": {all["web.prod"][0], all["web.prod"][1]}})
}

// TestMaxStaleness: with max staleness set, a cluster away for longer has
// its endpoints removed (the other cluster's stay), and back when it is.
func TestMaxStaleness(t *testing.T) {
	east := newFakeCluster("east", eslice("prod", "web", "web-a", v4, grpcPort, ep("web-1", "10.0.0.1", "", ready)))
	west := newFakeCluster("west", eslice("prod", "web", "web-x", v4, grpcPort, ep("web-1", "10.1.0.1", "", ready)))
	h := start(t, harnessOpts{cfg: Config{MaxStaleness: 200 * time.Millisecond}}, east, west)
	e1 := view{"web-1-east", "10.0.0.1", "grpc=8080/tcp", "", "", registry.Healthy}
	w1 := view{"web-1-west", "10.1.0.1", "grpc=8080/tcp", "", "", registry.Healthy}
	h.expect(t, "synced", map[string][]view{"web.prod": {e1, w1}})

	east.setDown(true)
	h.expect(t, "east dropped", map[string][]view{"web.prod": {w1}})
	st := h.status("east")
	if !st.Stale || !st.Dropped || time.Since(st.StaleSince) < 200*time.Millisecond {
		t.Errorf("Status(east) = %+v, want stale for at least 200ms and dropped", st)
	}
	if got := h.gauge(h.src.metrics.dropped, "east"); got != 1 {
		t.Errorf("spillway_kubernetes_cluster_dropped{east} = %v, want 1", got)
	}

	east.setDown(false)
	h.expect(t, "east back", map[string][]view{"web.prod": {e1, w1}})
	waitFor(t, "dropped cleared", func() bool { return h.gauge(h.src.metrics.dropped, "east") == 0 })
	if st := h.status("east"); st.Stale || st.Dropped {
		t.Errorf("Status(east) = %+v after recovery, want fresh", st)
	}
	svc, _ := h.store.Snapshot().Service("web.prod")
	if e, _ := svc.Endpoint("web-1-east"); !e.Registered.IsZero() {
		t.Errorf("restored endpoint Registered = %v, want zero (it was there all along)", e.Registered)
	}
}

// TestSyncTimeout: a cluster unreachable at startup does not hold the
// ready signal beyond the sync timeout; it is stale, and joins when it
// answers.
func TestSyncTimeout(t *testing.T) {
	east := newFakeCluster("east", eslice("prod", "web", "web-a", v4, grpcPort, ep("web-1", "10.0.0.1", "", ready)))
	west := newFakeCluster("west", eslice("prod", "web", "web-x", v4, grpcPort, ep("web-1", "10.1.0.1", "", ready)))
	east.setDown(true)
	startT := time.Now()
	h := start(t, harnessOpts{cfg: Config{SyncTimeout: 300 * time.Millisecond}}, east, west)
	if d := time.Since(startT); d < 300*time.Millisecond {
		t.Errorf("ready after %v, want the 300ms sync timeout", d)
	}
	w1 := view{"web-1-west", "10.1.0.1", "grpc=8080/tcp", "", "", registry.Healthy}
	h.expect(t, "west served", map[string][]view{"web.prod": {w1}})
	if st := h.status("east"); !st.Stale || st.Synced || !strings.Contains(st.String(), "not synced") {
		t.Errorf("Status(east) = %+v (%s), want stale, not synced", st, st)
	}
	east.setDown(false)
	h.expect(t, "east joins", map[string][]view{"web.prod": {{"web-1-east", "10.0.0.1", "grpc=8080/tcp", "", "", registry.Healthy}, w1}})
	waitFor(t, "east fresh", func() bool { st := h.status("east"); return st.Synced && !st.Stale })
}

// TestSourceConflict: an endpoint id another source owns is left out, and
// the rest of the service is applied.
func TestSourceConflict(t *testing.T) {
	c := newFakeCluster("east", eslice("prod", "web", "web-a", v4, grpcPort, ep("web-1", "10.0.0.1", "", ready), ep("web-2", "10.0.0.2", "", ready)))
	store := registry.NewStore()
	if _, err := store.Apply(registry.Upsert("web.prod", &registry.Endpoint{ID: "web-1", Address: mustAddr("192.0.2.1"),
		Ports: []registry.Port{{Name: "grpc", Number: 1}}, Source: registry.SourceVM})); err != nil {
		t.Fatal(err)
	}
	src, err := New(Config{Clusters: []ClusterConfig{{Name: "east", Client: c.cs}}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{}, 1)
	go func() { done <- src.Run(ctx, ready) }()
	defer func() { cancel(); <-done }()
	<-ready
	got := services(store.Snapshot(), "web.prod")["web.prod"]
	want := []string{"web-1 192.0.2.1", "web-2 10.0.0.2"}
	var ids []string
	for _, v := range got {
		ids = append(ids, v.ID+" "+v.Address)
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("web.prod = %v, want %v (the VM keeps its id)", ids, want)
	}
}

// TestEndpointNameRefused: an endpoint whose SRV target would pass 255
// octets under the store's domain, or whose name is a service's, is left
// out and counted; the other endpoints of its Service are applied.
func TestEndpointNameRefused(t *testing.T) {
	// web.prod under a 198-character domain (199 octets) leaves room for
	// ids of at most 255-1-(8+1)-199 = 46 characters.
	domain := strings.Repeat(strings.Repeat("d", 62)+".", 3) + "internal."
	store, err := registry.NewStoreWith(registry.StoreConfig{Domain: domain})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(registry.Declare("taken.web.prod")); err != nil {
		t.Fatal(err)
	}
	longPod := strings.Repeat("p", 60)
	c := newFakeCluster("east", eslice("prod", "web", "web-a", v4, grpcPort,
		ep("web-1", "10.0.0.1", "", ready), ep(longPod, "10.0.0.2", "", ready), ep("taken", "10.0.0.3", "", ready)))
	src, err := New(Config{Clusters: []ClusterConfig{{Name: "east", Client: c.cs}}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{}, 1)
	go func() { done <- src.Run(ctx, ready) }()
	defer func() { cancel(); <-done }()
	<-ready
	var ids []string
	for _, v := range services(store.Snapshot(), "web.prod")["web.prod"] {
		ids = append(ids, v.ID)
	}
	if want := []string{"web-1"}; !slices.Equal(ids, want) {
		t.Errorf("web.prod = %v, want %v (the too-long and the taken names left out, the rest applied)", ids, want)
	}
	if n := testutil.ToFloat64(src.metrics.badNames); n != 2 {
		t.Errorf("bad names counted = %v, want 2", n)
	}
}
