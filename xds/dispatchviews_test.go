package xds

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/subset"
)

// viewStream is one synchronous EDS stream of service web for
// TestDispatchViews: woken counts the hub's wakes, sends its responses.
type viewStream struct {
	st    *sotwStream
	ds    *discardStream
	woken int
	sends int
}

// push runs the stream's pending push and counts a response if one was
// sent.
func (v *viewStream) push(t testing.TB) {
	t.Helper()
	before := v.ds.sent
	if err := v.st.push(); err != nil {
		t.Fatal(err)
	}
	if v.ds.sent != before {
		v.sends++
	}
}

// newViewStream opens stream i of a client in zone-a on web's EDS and
// answers its request.
func newViewStream(t testing.TB, s *Server, i int) *viewStream {
	t.Helper()
	v := &viewStream{ds: &discardStream{codec: newCodec()}}
	v.st = &sotwStream{s: s, stream: v.ds}
	v.st.w = newWatcher(func(bool) { v.woken++ })
	v.st.fan = s.fan
	req := &v3discoverypb.DiscoveryRequest{
		TypeUrl: typeURLs[3], ResourceNames: []string{"web"},
		Node: &v3corepb.Node{Id: fmt.Sprintf("c-%d", i), Locality: &v3corepb.Locality{Region: "r1", Zone: "zone-a"}},
	}
	if err := v.st.handle(req); err != nil {
		t.Fatal(err)
	}
	v.push(t)
	return v
}

// TestDispatchViews: of 9 streams with subsets of 4 of web's 12
// endpoints, a registry change wakes exactly the streams whose subset
// holds the endpoint that changed, and a plan change exactly those whose
// subset or weights it changed. Every woken stream then sends (no wasted
// wake) and a full re-evaluation of every stream afterwards sends nothing
// (no change missed), through a removal, the endpoint's return (the
// streams that pushed in between see it come back), the plan that
// gives a new client a slot, and subsets turned off and on again.
func TestDispatchViews(t *testing.T) {
	store := benchStore(t, 12) // ep-0..ep-11 over zone-a, zone-b, zone-c
	store.MarkSynced()
	var p *weights.Planner
	subsetsOff := false
	s, err := New(Config{Store: store, Plans: PlanFunc(func(n string) *weights.Plan { return p.Plan(n) })})
	if err != nil {
		t.Fatal(err)
	}
	p, err = weights.NewPlanner(weights.Config{
		Registry: store, Loads: s.Loads(), Clients: s, Zones: s, PortName: s.cfg.PortName, OnChange: s.Dispatch,
		Strategies: weights.StrategyFunc(func(string) weights.Strategy {
			if subsetsOff {
				return weights.Strategy{ZoneAware: true}
			}
			return weights.Strategy{ZoneAware: true, Subset: weights.SubsetConfig{Mode: subset.Deterministic, Size: 4}}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	streams := make([]*viewStream, 9)
	for i := range streams {
		streams[i] = newViewStream(t, s, i)
	}
	// holders lists the streams whose subset in the current plan holds id.
	holders := func(id string) []int {
		plan := p.Plan("web")
		var out []int
		for i, v := range streams {
			slot, ok := s.hub.slots.slot(v.st.w, "web")
			if !ok {
				t.Fatalf("stream %d holds no slot", i)
			}
			n := plan.Subsets.Slots(subset.Group{Zone: "zone-a"})
			if slices.Contains(plan.Subsets.Subset(subset.Group{Zone: "zone-a"}, slot%n), id) {
				out = append(out, i)
			}
		}
		return out
	}
	// step dispatches names as change does and pushes the woken streams;
	// it returns which were woken, after checking that each of them sent
	// and that no stream has anything left to send.
	step := func(what string, dispatch func()) []int {
		t.Helper()
		for _, v := range streams {
			v.woken, v.sends = 0, 0
		}
		dispatch()
		var woken []int
		for i, v := range streams {
			if v.woken == 0 {
				continue
			}
			woken = append(woken, i)
			v.push(t)
			if v.sends != 1 {
				t.Errorf("%s: stream %d was woken and sent nothing", what, i)
			}
		}
		for i, v := range streams {
			v.sends = 0
			v.st.w.mark("", true, time.Now())
			v.push(t)
			if v.sends != 0 {
				t.Errorf("%s: stream %d was not woken but its EDS had changed", what, i)
			}
		}
		return woken
	}

	if got := step("the first plan", func() { p.Cycle(time.Now()) }); len(got) != len(streams) {
		t.Fatalf("the first plan woke streams %v, want all %d: each gets its subset", got, len(streams))
	}
	want := holders("ep-0")
	if len(want) == 0 || len(want) == len(streams) {
		t.Fatalf("ep-0 is in the subsets of streams %v: the test needs some streams without it", want)
	}
	kept := func() float64 { return testutil.ToFloat64(s.metrics.subsetKept) }
	k0 := kept()
	if _, err := store.Apply(registry.Remove("web", "ep-0", registry.SourceStatic)); err != nil {
		t.Fatal(err)
	}
	if got := step("ep-0 removed", func() { s.dispatchViews([]string{"web"}, time.Now(), toAll) }); !slices.Equal(got, want) {
		t.Errorf("ep-0 removed: woke streams %v, want its holders %v", got, want)
	}
	if got, want := kept()-k0, float64(len(streams)-len(want)); got != want {
		t.Errorf("spillway_xds_subset_streams_unchanged_total grew by %v, want %v", got, want)
	}
	ep0 := benchStore(t, 1).Snapshot()
	svc, _ := ep0.Service("web")
	if _, err := store.Apply(registry.Upsert("web", svc.Endpoints[0])); err != nil {
		t.Fatal(err)
	}
	if got := step("ep-0 back", func() { s.dispatchViews([]string{"web"}, time.Now(), toAll) }); !slices.Equal(got, want) {
		t.Errorf("ep-0 back: woke streams %v, want its holders %v", got, want)
	}

	// A tenth client: the next plan gives its slot a subset of its own
	// and moves a few endpoints between the others; the cycle's OnChange
	// wakes the streams whose subsets changed, not all of them.
	streams = append(streams, newViewStream(t, s, len(streams)))
	gen := p.Plan("web").Gen
	woken := step("the plan with ten slots", func() { p.Cycle(time.Now()) })
	if p.Plan("web").Gen == gen {
		t.Fatal("the cycle after a tenth stream kept the plan")
	}
	t.Logf("the plan with ten slots woke %d of %d streams: %v", len(woken), len(streams), woken)
	if !slices.Contains(woken, len(streams)-1) || len(woken) == len(streams) {
		t.Errorf("the plan with ten slots woke streams %v, want the new one and not all", woken)
	}

	// Subsets off, then on again: every stream gets every endpoint, then
	// its subset back, though the subset is the one it last held before
	// (the full EDS in between must not count as that subset).
	subsetsOff = true
	if got := step("subsets off", func() { p.Cycle(time.Now()) }); len(got) != len(streams) {
		t.Errorf("subsets off woke streams %v, want all %d", got, len(streams))
	}
	subsetsOff = false
	if got := step("subsets on again", func() { p.Cycle(time.Now()) }); len(got) != len(streams) {
		t.Errorf("subsets on again woke streams %v, want all %d", got, len(streams))
	}

	// A stream whose push is running when a change comes may have read
	// the registry before it: it is woken whatever its last build.
	v := streams[len(streams)-1]
	v.woken = 0
	v.st.w.take()
	s.dispatchViews([]string{"web"}, time.Now(), toAll)
	if v.woken != 1 {
		t.Errorf("a stream in the middle of a push was woken %d times by a change, want 1", v.woken)
	}
	v.st.w.done()
}
