package exchange

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/internal/testwait"
	"github.com/spillway/spillway/load"
)

const testInterval = 50 * time.Millisecond

// eventually polls cond until it holds; the 20 s bound only stops a hung
// test, it is not a speed check.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startSender runs s until the returned stop is called (or the test ends).
func startSender(t *testing.T, s *Sender) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Sender %s Run = %v", s.ID, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func fixedLocal(ss ...load.ServiceSummary) func(time.Time) []load.ServiceSummary {
	return func(now time.Time) []load.ServiceSummary {
		out := make([]load.ServiceSummary, len(ss))
		for i, s := range ss {
			s.Flows = append([]load.Flow(nil), s.Flows...)
			for j := range s.Flows {
				s.Flows[j].Updated = now
			}
			out[i] = s
		}
		return out
	}
}

var dialInsecure = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}

func TestTwoSendersOneOwner(t *testing.T) {
	m := NewMerged(MergedConfig{})
	addr := startServer(t, m)
	route := func(svc string) (string, string, bool) {
		if svc == "orphan" {
			return "", "", false
		}
		return "owner", addr, true
	}
	reg := prometheus.NewRegistry()
	stopA := startSender(t, &Sender{
		ID: "ra", Interval: testInterval, Route: route, DialOptions: dialInsecure, Registerer: reg,
		Local: fixedLocal(
			load.ServiceSummary{Service: "svc", Flows: []load.Flow{{ClientZone: "zone-a", Zone: "zone-a", Issued: 100, Reporters: 3}}, Clients: []load.ClientCount{{Zone: "zone-a", Count: 3}}},
			load.ServiceSummary{Service: "orphan", Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}}},
		),
	})
	stopB := startSender(t, &Sender{
		ID: "rb", Interval: testInterval, Route: route, DialOptions: dialInsecure,
		Local: fixedLocal(load.ServiceSummary{Service: "svc",
			Flows:   []load.Flow{{ClientZone: "zone-a", Zone: "zone-a", Issued: 1, Reporters: 1}, {ClientZone: "zone-b", Zone: "zone-a", Issued: 10, Reporters: 1}},
			Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}, {Zone: "zone-b", Count: 1}},
		}),
	})

	type flowSum struct {
		ClientZone, Zone string
		Issued           float64
		Reporters        int
	}
	sums := func() []flowSum {
		var out []flowSum
		for _, l := range m.Loads("svc", time.Now()) {
			out = append(out, flowSum{l.ClientZone, l.Locality.Zone, l.Issued, l.Reporters})
		}
		return out
	}
	both := []flowSum{{"zone-a", "zone-a", 101, 4}, {"zone-b", "zone-a", 10, 1}}
	wantCounts := map[string]map[string]int{"svc": {"zone-a": 4, "zone-b": 1}}
	// Sums, client counts and fresh contributors at one instant: a sender
	// that a busy machine delays for more than FreshIntervals drops out
	// for a moment and comes back, so all of it is waited for together.
	testwait.For(t, 20*time.Second, "Merged sums both senders, counts their clients and names both fresh", func() (bool, string) {
		got, counts, cs := sums(), m.ClientCounts(), m.Contributors("svc", time.Now())
		seen := fmt.Sprintf("sums %+v, client counts %v, contributors %+v", got, counts, cs)
		if !cmp.Equal(got, both) || !cmp.Equal(counts, wantCounts) || len(cs) != 2 || cs[0].Replica != "ra" || cs[1].Replica != "rb" {
			return false, seen
		}
		for _, c := range cs {
			if c.Age < 0 || c.Age > FreshIntervals*testInterval {
				return false, seen
			}
		}
		return true, seen
	})
	if got := m.Loads("orphan", time.Now()); len(got) != 0 {
		t.Errorf("Loads(orphan) = %v, want none (no owner)", got)
	}

	// rb goes silent: within 3 intervals its share expires.
	stopB()
	testwait.For(t, 20*time.Second, "rb's load, clients and contribution expire", func() (bool, string) {
		got, counts, cs := sums(), m.ClientCounts(), m.Contributors("svc", time.Now())
		ok := cmp.Equal(got, []flowSum{{"zone-a", "zone-a", 100, 3}}) &&
			cmp.Equal(counts, map[string]map[string]int{"svc": {"zone-a": 3}}) &&
			len(cs) == 1 && cs[0].Replica == "ra"
		return ok, fmt.Sprintf("sums %+v, client counts %v, contributors %+v", got, counts, cs)
	})
	stopA()
	if got := counter(t, reg, "spillway_mesh_load_unrouted_services_total", ""); got < 1 {
		t.Errorf("unrouted services = %v, want >= 1 (orphan)", got)
	}
	if got := counter(t, reg, "spillway_mesh_load_bytes_total", "sent"); got <= 0 {
		t.Errorf("bytes sent = %v, want > 0", got)
	}
}

// counter returns the value of counter name in reg with the given label
// value ("" for an unlabelled counter), summed over matching series.
func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.Metric {
			if label == "" || len(mm.GetLabel()) == 1 && mm.GetLabel()[0].GetValue() == label {
				v += mm.GetCounter().GetValue()
			}
		}
	}
	return v
}

func TestSenderOwnerDown(t *testing.T) {
	m := NewMerged(MergedConfig{})
	live := startServer(t, m)

	// refused: nothing listens there any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	refused := l.Addr().String()
	l.Close()
	// blackhole: accepts TCP and never answers.
	bh, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var held []net.Conn
	var mu sync.Mutex
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := bh.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		bh.Close()
		<-acceptDone
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})

	var deliveries int
	var dmu sync.Mutex
	reg := prometheus.NewRegistry()
	startSender(t, &Sender{
		ID: "rc", Interval: testInterval, DialOptions: dialInsecure, Registerer: reg,
		Route: func(svc string) (string, string, bool) {
			switch svc {
			case "to-refused":
				return "dead", refused, true
			case "to-blackhole":
				return "hung", bh.Addr().String(), true
			case "mine":
				return "rc", "", true
			}
			return "owner", live, true
		},
		Deliver: func(s load.Summary) {
			if len(s.Services) != 1 || s.Services[0].Service != "mine" {
				t.Errorf("Deliver got %+v, want only service mine", s.Services)
			}
			dmu.Lock()
			deliveries++
			dmu.Unlock()
		},
		Local: fixedLocal(
			load.ServiceSummary{Service: "to-refused", Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}}},
			load.ServiceSummary{Service: "to-blackhole", Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}}},
			load.ServiceSummary{Service: "mine", Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}}},
			load.ServiceSummary{Service: "svc", Clients: []load.ClientCount{{Zone: "zone-c", Count: 5}}},
		),
	})

	// The live owner keeps getting rounds, one after another, while the
	// other two fail: 10 successive fresh arrivals.
	for range 10 {
		since := time.Now()
		eventually(t, "round to the live owner", func() bool { return m.Fresh("rc", since) })
	}
	if diff := cmp.Diff(map[string]map[string]int{"svc": {"zone-c": 5}}, m.ClientCounts()); diff != "" {
		t.Errorf("live owner's ClientCounts (-want +got):\n%s", diff)
	}
	dmu.Lock()
	n := deliveries
	dmu.Unlock()
	if n < 5 {
		t.Errorf("Deliver called %d times over 10 rounds, want >= 5", n)
	}
	eventually(t, "rounds to the dead owners counted as dropped", func() bool {
		return counter(t, reg, "spillway_mesh_load_summaries_total", "dropped") >= 2
	})
	if got := counter(t, reg, "spillway_mesh_load_summaries_total", "delivered"); got < 5 {
		t.Errorf("delivered summaries metric = %v, want >= 5", got)
	}
}

// utilLocal returns the services' reports with Reported placed age before
// the round's now, as a UtilizationTable would hold them.
func utilLocal(service string, ages map[string]time.Duration, cpus map[string]float64) func(time.Time) []load.ServiceSummary {
	return func(now time.Time) []load.ServiceSummary {
		var eps []load.EndpointUtilization
		for id, age := range ages {
			eps = append(eps, report(id, cpus[id], 0, 0, now.Add(-age), time.Second))
		}
		return SummarizeWith(nil, nil, map[string][]load.EndpointUtilization{service: eps})
	}
}

// TestUtilizationsTwoSenders: a backend's utilization reports may reach
// any replica; the owner sees those of both senders, and for an endpoint
// reported through both, the newest report.
func TestUtilizationsTwoSenders(t *testing.T) {
	m := NewMerged(MergedConfig{})
	addr := startServer(t, m)
	route := func(string) (string, string, bool) { return "owner", addr, true }
	startSender(t, &Sender{
		ID: "ra", Interval: testInterval, Route: route, DialOptions: dialInsecure,
		Local: utilLocal("payments",
			map[string]time.Duration{"pay-1": 100 * time.Millisecond, "pay-shared": 400 * time.Millisecond},
			map[string]float64{"pay-1": 0.1, "pay-shared": 0.2}),
	})
	startSender(t, &Sender{
		ID: "rb", Interval: testInterval, Route: route, DialOptions: dialInsecure,
		Local: utilLocal("payments",
			map[string]time.Duration{"pay-2": 100 * time.Millisecond, "pay-shared": 10 * time.Millisecond},
			map[string]float64{"pay-2": 0.5, "pay-shared": 0.8}),
	})
	want := map[string]float64{"pay-1": 0.1, "pay-2": 0.5, "pay-shared": 0.8}
	var got map[string]float64
	eventually(t, "the owner holds both senders' reports, the newest for pay-shared", func() bool {
		got = map[string]float64{}
		us := m.Utilizations("payments", time.Now())
		for i, u := range us {
			got[u.ID] = u.CPU
			if i > 0 && us[i-1].ID >= u.ID {
				t.Fatalf("Utilizations not sorted by ID: %+v", us)
			}
			if u.Utilization != u.CPU || u.Interval != time.Second {
				t.Fatalf("report %+v: want Utilization = CPU and Interval 1s", u)
			}
		}
		return cmp.Equal(got, want)
	})
	if got := m.Utilizations("search", time.Now()); len(got) != 0 {
		t.Errorf("Utilizations(search) = %+v, want none", got)
	}
}

// TestSenderAcksEveryOwner: each round every owner in the records gets
// one summary listing the shards routed to it, even with no services;
// this replica's own shards go through Deliver.
func TestSenderAcksEveryOwner(t *testing.T) {
	mb, mc := NewMerged(MergedConfig{}), NewMerged(MergedConfig{})
	addrB, addrC := startServer(t, mb), startServer(t, mc)
	var mu sync.Mutex
	var delivered []load.Summary
	owners := []ShardOwner{
		{Shard: 0, Replica: "ra", Addr: "unused", Epoch: 4},
		{Shard: 1, Replica: "rb", Addr: addrB, Epoch: 2},
		{Shard: 2, Replica: "rc", Addr: addrC, Epoch: 7},
		{Shard: 3, Replica: "rb", Addr: addrB, Epoch: 1},
		{Shard: 4, Replica: "rd", Addr: "", Epoch: 1},    // no address: skipped
		{Shard: 5, Replica: "rb", Addr: addrB, Epoch: 0}, // invalid: skipped
	}
	since := time.Now()
	startSender(t, &Sender{
		ID: "ra", Interval: testInterval, DialOptions: dialInsecure,
		Owners: func() []ShardOwner { return owners },
		// Only rb's shard 1 has load here; rc has none.
		Route: func(string) (string, string, bool) { return "rb", addrB, true },
		Local: fixedLocal(load.ServiceSummary{Service: "svc", Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}}}),
		Deliver: func(s load.Summary) {
			mu.Lock()
			defer mu.Unlock()
			delivered = append(delivered, s)
		},
	})
	eventually(t, "rb acked shards 1 and 3", func() bool { return mb.Acked("ra", 1, 2, since) && mb.Acked("ra", 3, 1, since) })
	eventually(t, "rc (no services) acked shard 2", func() bool { return mc.Acked("ra", 2, 7, since) })
	for _, tc := range []struct {
		m     *Merged
		shard int
		epoch int64
	}{{mb, 2, 7}, {mb, 0, 4}, {mb, 4, 1}, {mb, 5, 0}, {mc, 1, 2}, {mc, 0, 4}} {
		if tc.m.Acked("ra", tc.shard, tc.epoch, since) {
			t.Errorf("Acked(ra, %d, %d) = true at an owner the shard is not routed to", tc.shard, tc.epoch)
		}
	}
	if got := mc.Size(); got != (Size{Senders: 1}) {
		t.Errorf("rc's Merged = %+v, want one sender and no services", got)
	}
	if got := mb.Size(); got != (Size{Senders: 1, Services: 1}) {
		t.Errorf("rb's Merged = %+v, want one sender with svc", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) == 0 {
		t.Fatal("nothing delivered to this replica's own Merged")
	}
	last := delivered[len(delivered)-1]
	if diff := cmp.Diff([]load.ShardEpoch{{Shard: 0, Epoch: 4}}, last.Shards); diff != "" || len(last.Services) != 0 {
		t.Errorf("delivered %+v, want shard 0 epoch 4 and no services (-want +got shards):\n%s", last, diff)
	}
}
