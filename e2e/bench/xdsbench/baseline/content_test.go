package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/spillway/spillway/e2e/bench/xdsbench/internal/benchdata"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/xdstest"
)

// regionServices are services as e2e/bench/scale writes the region's
// data file: endpoint n of the region at 10.(n>>16).(n>>8).n:8080 with the
// id the registry gives it ("10-0-0-1-8080"), endpoint j of a service in
// zone j%3. Sizes: the region's largest service (10,000 endpoints), and
// two of 12, for clients of every zone and of zone-a alone.
func regionServices() []benchdata.Service {
	sizes := []int{10_000, 12, 12}
	zones := benchdata.Zones(3)
	var out []benchdata.Service
	n := 0
	for i, size := range sizes {
		s := benchdata.Service{Name: fmt.Sprintf("svc-%05d", i)}
		for j := range size {
			a := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
			s.Endpoints = append(s.Endpoints, benchdata.Endpoint{ID: registry.DefaultEndpointID(a, benchdata.Port), Address: a, Zone: zones[j%len(zones)]})
			n++
		}
		out = append(out, s)
	}
	return out
}

// TestSameContentEqualsSpillway compares, for a client of zone-a, the
// ClusterLoadAssignment spillway's xDS server sends (a real xds.Server
// with the zone-aware planner cmd/spillway runs by default, the data set
// loaded as its --static-file loads it, read from a raw ADS stream) with
// the baseline's with --same-content: equal bytes for a service with
// clients in every zone; for one whose clients are all in zone-a (the
// planner then spills to the other zones) equal but for the locality
// weights, at most a byte each. With -v it logs the bytes per endpoint of
// every field of both and of the default baseline's.
func TestSameContentEqualsSpillway(t *testing.T) {
	services := regionServices()
	zones := benchdata.Zones(3)
	store := registry.NewStore()
	var ops []registry.Op
	for _, s := range services {
		for _, e := range s.Endpoints {
			ops = append(ops, registry.Upsert(s.Name, &registry.Endpoint{
				ID: e.ID, Address: e.Address,
				Ports:    []registry.Port{{Name: benchdata.PortName, Number: benchdata.Port}},
				Locality: registry.Locality{Region: benchdata.Region, Zone: e.Zone},
				Source:   registry.SourceStatic,
			}))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()
	var planner *weights.Planner
	srv := xdstest.Start(t, xds.Config{Store: store, Plans: xds.PlanFunc(func(s string) *weights.Plan { return planner.Plan(s) })})
	planner, err := weights.NewPlanner(weights.Config{
		Registry: store, Loads: srv.XDS.Loads(), Clients: srv.XDS, Zones: srv.XDS,
		ZoneAware: zoneaware.Config{}, OnChange: srv.XDS.Dispatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })

	// The clients the planner plans for: svc-00000 and svc-00001 in every
	// zone, svc-00002 in zone-a alone.
	clientZones := [][]string{zones, zones, zones[:1]}
	for i, s := range services {
		for _, z := range clientZones[i] {
			firstEDS(t, cc, s.Name, z)
		}
	}
	planner.Cycle(time.Now())

	defModel := &model{zones: zones}
	sameModel := &model{zones: zones, sameContent: true}
	for i, s := range services {
		spill := firstEDS(t, cc, s.Name, "zone-a") // under the plan
		same := marshalCLA(t, sameModel.assignment(s, "zone-a"))
		spillB, sameB := fieldBytes(spill), fieldBytes(same)
		t.Logf("%s", breakdownTable(s, []string{"spillway", "baseline", "baseline --same-content"},
			[]map[string]int{spillB, fieldBytes(marshalCLA(t, defModel.assignment(s, "zone-a"))), sameB}))
		if len(clientZones[i]) == len(zones) {
			if !bytes.Equal(same, spill) {
				t.Errorf("%s, zone-a: --same-content's assignment (%d bytes) differs from spillway's (%d bytes)", s.Name, len(same), len(spill))
			}
			continue
		}
		// Clients in one zone: the locality weights follow the planner.
		const lw = "endpoints.load_balancing_weight.value"
		if d := sameB[lw] - spillB[lw]; d < -len(zones) || d > len(zones) {
			t.Errorf("%s, zone-a: locality weights take %d bytes in --same-content's assignment, %d in spillway's: more than a byte per locality apart", s.Name, sameB[lw], spillB[lw])
		}
		delete(spillB, lw)
		delete(sameB, lw)
		if !maps.Equal(sameB, spillB) {
			t.Errorf("%s, zone-a: beside the locality weights, --same-content's fields differ from spillway's:\n got %v\nwant %v", s.Name, sameB, spillB)
		}
	}
}

// With --same-content an added endpoint takes its place in id order, as
// in spillway's registry, and the assignment lists it there.
func TestSameContentChangeKeepsIDOrder(t *testing.T) {
	m, err := newLinearModel(withSameContent(dataSet{services: benchdata.Services(2, 12, 3), zones: benchdata.Zones(3)}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.change(context.Background(), "add", "svc-001", "ep-105", "10.200.0.1", "zone-b"); err != nil {
		t.Fatal(err)
	}
	eps := m.services[1].Endpoints
	if !slices.IsSortedFunc(eps, byID) || !slices.ContainsFunc(eps, func(e benchdata.Endpoint) bool { return e.ID == "ep-105" }) {
		t.Errorf("endpoints after adding ep-105: %v, want every one, in id order", eps)
	}
	var ids []string
	for _, l := range m.assignment(m.services[1], "zone-a").GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			ids = append(ids, e.GetEndpoint().GetHostname())
		}
	}
	if want := []string{"ep-0", "ep-3", "ep-6", "ep-9", "ep-1", "ep-10", "ep-105", "ep-4", "ep-7", "ep-11", "ep-2", "ep-5", "ep-8"}; !slices.Equal(ids, want) {
		t.Errorf("hostnames of svc-001 after adding ep-105 = %v, want %v", ids, want)
	}
}

// firstEDS opens an ADS stream on cc for a client of zone subscribed to
// the four types of service, as xdsbench's clients do, and returns the
// ClusterLoadAssignment of its first EDS response. The stream stays open
// (a client the planner counts) until the test ends.
func firstEDS(t *testing.T, cc *grpc.ClientConn, service, zone string) []byte {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ads, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	for i, typ := range allTypes {
		req := &v3discoverypb.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{service}}
		if i == 0 {
			req.Node = &v3corepb.Node{Id: service + "-" + zone, Locality: &v3corepb.Locality{Region: benchdata.Region, Zone: zone}}
		}
		if err := ads.Send(req); err != nil {
			t.Fatalf("subscribe %s: %v", typ, err)
		}
	}
	for {
		resp, err := ads.Recv()
		if err != nil {
			t.Fatalf("%s, %s: recv: %v", service, zone, err)
		}
		if resp.GetTypeUrl() != resource.EndpointType {
			continue
		}
		if n := len(resp.GetResources()); n != 1 {
			t.Fatalf("%s, %s: EDS of %d resources, want 1", service, zone, n)
		}
		return resp.GetResources()[0].GetValue()
	}
}

// marshalCLA marshals cla as go-control-plane's caches do.
func marshalCLA(t *testing.T, cla *v3endpointpb.ClusterLoadAssignment) []byte {
	t.Helper()
	b, err := cache.MarshalResource(cla)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fieldBytes splits a marshaled ClusterLoadAssignment's bytes by field
// path ("endpoints.lb_endpoints.endpoint.hostname"): a scalar or string
// field its tag and value; a message field its tag and length prefix,
// under its path + " (tag+len)", and its content under its fields. The
// parts sum to len(b).
func fieldBytes(b []byte) map[string]int {
	out := map[string]int{}
	walkFields((&v3endpointpb.ClusterLoadAssignment{}).ProtoReflect().Descriptor(), b, "", out)
	return out
}

func walkFields(md protoreflect.MessageDescriptor, b []byte, prefix string, out map[string]int) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			out[prefix+"(malformed)"] += len(b)
			return
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			out[prefix+"(malformed)"] += len(b)
			return
		}
		fd := md.Fields().ByNumber(num)
		switch {
		case fd == nil:
			out[fmt.Sprintf("%s%d (unknown)", prefix, num)] += n + m
		case fd.Kind() == protoreflect.MessageKind && typ == protowire.BytesType:
			v, _ := protowire.ConsumeBytes(b[n:])
			out[prefix+string(fd.Name())+" (tag+len)"] += n + m - len(v)
			walkFields(fd.Message(), v, prefix+string(fd.Name())+".", out)
		default:
			out[prefix+string(fd.Name())] += n + m
		}
		b = b[n+m:]
	}
}

// breakdownTable renders the field bytes of one service's assignments
// (one column per name) per endpoint of s.
func breakdownTable(s benchdata.Service, names []string, parts []map[string]int) string {
	var paths []string
	for _, p := range parts {
		for k := range p {
			if !slices.Contains(paths, k) {
				paths = append(paths, k)
			}
		}
	}
	slices.Sort(paths)
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d endpoints, a client of zone-a: bytes per endpoint\n%-68s", s.Name, len(s.Endpoints), "field")
	for _, n := range names {
		fmt.Fprintf(&b, " %24s", n)
	}
	row := func(name string, f func(map[string]int) int) {
		fmt.Fprintf(&b, "\n%-68s", name)
		for _, p := range parts {
			fmt.Fprintf(&b, " %24.2f", float64(f(p))/float64(len(s.Endpoints)))
		}
	}
	for _, path := range paths {
		row(path, func(p map[string]int) int { return p[path] })
	}
	total := func(p map[string]int) int {
		sum := 0
		for _, v := range p {
			sum += v
		}
		return sum
	}
	row("total", total)
	fmt.Fprintf(&b, "\n%-68s", "total bytes")
	for _, p := range parts {
		fmt.Fprintf(&b, " %24d", total(p))
	}
	return b.String()
}
