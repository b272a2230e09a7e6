package exchange

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/weights/subset"
)

func flow(cz, z string, issued float64, reporters int, updated time.Time) load.Flow {
	return load.Flow{ClientZone: cz, Zone: z, Issued: issued, Succeeded: issued, Reporters: reporters, Updated: updated}
}

func summary(replica string, at time.Time, interval time.Duration, services ...load.ServiceSummary) load.Summary {
	return load.Summary{Replica: replica, At: at, Interval: interval, Services: services}
}

func mkLoad(svc, cz, z string, issued float64, reporters int, updated time.Time) load.Load {
	var l load.Load
	l.Service, l.ClientZone, l.Locality.Zone = svc, cz, z
	l.Issued, l.Succeeded, l.Reporters, l.Updated = issued, issued, reporters, updated
	return l
}

func TestMergedSumsFreshSenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMerged(MergedConfig{})
		now := time.Now()
		// r1's clock is 1 h ahead: its flow ages still land on the owner's clock.
		skew := time.Hour
		must(t, m.Add(summary("r1", now.Add(skew), time.Second, load.ServiceSummary{
			Service: "svc",
			Flows:   []load.Flow{flow("zone-a", "zone-a", 100, 3, now.Add(skew-200*time.Millisecond))},
			Clients: []load.ClientCount{{Zone: "zone-a", Count: 3}},
		}), now))
		must(t, m.Add(summary("r2", now, 2*time.Second, load.ServiceSummary{
			Service: "svc",
			Flows: []load.Flow{
				flow("zone-a", "zone-a", 5, 1, now.Add(-time.Second)),
				flow("zone-b", "zone-a", 20, 2, now.Add(-time.Second)),
			},
			Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}, {Zone: "zone-b", Count: 2}},
		}), now))

		got := m.Loads("svc", now)
		want := []load.Load{
			mkLoad("svc", "zone-a", "zone-a", 105, 4, now.Add(-200*time.Millisecond)),
			mkLoad("svc", "zone-b", "zone-a", 20, 2, now.Add(-time.Second)),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Loads (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]map[string]int{"svc": {"zone-a": 4, "zone-b": 2}}, m.ClientCounts()); diff != "" {
			t.Errorf("ClientCounts (-want +got):\n%s", diff)
		}
		wantSlots := map[subset.Group]int{{Replica: "r1", Zone: "zone-a"}: 3, {Replica: "r2", Zone: "zone-a"}: 1, {Replica: "r2", Zone: "zone-b"}: 2}
		if diff := cmp.Diff(wantSlots, m.SubsetSlots("svc")); diff != "" {
			t.Errorf("SubsetSlots(svc) (-want +got):\n%s", diff)
		}
		if got := m.SubsetSlots("other"); got != nil {
			t.Errorf("SubsetSlots(other) = %v, want nil for a service no summary has", got)
		}

		// 3.5 s later r1 (1 s interval) is stale, r2 (2 s) is not.
		time.Sleep(3500 * time.Millisecond)
		now = time.Now()
		got = m.Loads("", now)
		want = []load.Load{
			mkLoad("svc", "zone-a", "zone-a", 5, 1, now.Add(-3500*time.Millisecond-time.Second)),
			mkLoad("svc", "zone-b", "zone-a", 20, 2, now.Add(-3500*time.Millisecond-time.Second)),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Loads after r1 went silent (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]Contributor{{Replica: "r2", Age: 3500 * time.Millisecond}}, m.Contributors("svc", now)); diff != "" {
			t.Errorf("Contributors (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]map[string]int{"svc": {"zone-a": 1, "zone-b": 2}}, m.ClientCounts()); diff != "" {
			t.Errorf("ClientCounts after r1 went silent (-want +got):\n%s", diff)
		}
		wantSlots = map[subset.Group]int{{Replica: "r2", Zone: "zone-a"}: 1, {Replica: "r2", Zone: "zone-b"}: 2}
		if diff := cmp.Diff(wantSlots, m.SubsetSlots("svc")); diff != "" {
			t.Errorf("SubsetSlots(svc) after r1 went silent (-want +got):\n%s", diff)
		}

		// r1 comes back: fresh again, and Fresh says so for a shard taken before.
		taken := now
		if m.Fresh("r1", taken) {
			t.Errorf("Fresh(r1, taken) = true before r1 sent again")
		}
		time.Sleep(time.Millisecond)
		must(t, m.Add(summary("r1", time.Now().Add(skew), time.Second, load.ServiceSummary{Service: "svc"}), time.Now()))
		if !m.Fresh("r1", taken) {
			t.Errorf("Fresh(r1, taken) = false after r1 sent again")
		}
		if m.Fresh("r3", time.Time{}) {
			t.Errorf("Fresh(r3) = true for a replica never heard from")
		}
		if got := len(m.Contributors("svc", time.Now())); got != 2 {
			t.Errorf("Contributors = %d replicas, want 2", got)
		}
	})
}

func TestMergedForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMerged(MergedConfig{})
		must(t, m.Add(summary("r1", time.Now(), time.Second, load.ServiceSummary{Service: "a"}, load.ServiceSummary{Service: "b"}), time.Now()))
		must(t, m.Add(summary("r2", time.Now(), time.Second, load.ServiceSummary{Service: "a"}), time.Now()))
		time.Sleep(3 * time.Minute)
		must(t, m.Add(summary("r1", time.Now(), time.Second, load.ServiceSummary{Service: "a"}), time.Now()))
		time.Sleep(3 * time.Minute) // r2 and r1's "b" silent for 6 min, r1's "a" for 3
		must(t, m.Add(summary("r3", time.Now(), time.Second, load.ServiceSummary{Service: "c"}), time.Now()))
		if got, want := m.Size(), (Size{Senders: 2, Services: 2}); got != want {
			t.Errorf("Size = %+v, want %+v (r2 and r1's b forgotten)", got, want)
		}
	})
}

func TestMergedBounds(t *testing.T) {
	now := t0
	m := NewMerged(MergedConfig{MaxSenders: 2, MaxServices: 2})
	must(t, m.Add(summary("r1", now, time.Second, load.ServiceSummary{Service: "a"}, load.ServiceSummary{Service: "b"}), now))
	must(t, m.Add(summary("r2", now, time.Second, load.ServiceSummary{Service: "a"}), now))
	before := m.Size()
	for _, s := range []load.Summary{
		summary("r3", now, time.Second, load.ServiceSummary{Service: "a"}),
		summary("r1", now, time.Second, load.ServiceSummary{Service: "c"}),
		summary("r2", now, time.Second, load.ServiceSummary{Service: "b"}, load.ServiceSummary{Service: "c"}),
	} {
		if err := m.Add(s, now); !errors.Is(err, ErrFull) {
			t.Errorf("Add(%s %v) = %v, want ErrFull", s.Replica, s.Services, err)
		}
	}
	if got := m.Size(); got != before {
		t.Errorf("Size after refused adds = %+v, want %+v", got, before)
	}
	// Replacing known services is within bounds.
	must(t, m.Add(summary("r1", now, time.Second, load.ServiceSummary{Service: "b"}), now))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestContributorArrivedAfterNow: a summary that arrived after the
// caller's now (the owner's cycle takes now, then a sender's summary
// lands) has age 0, never a negative one that plan records reject.
func TestContributorArrivedAfterNow(t *testing.T) {
	m := NewMerged(MergedConfig{})
	now := time.Now()
	must(t, m.Add(summary("r1", now, time.Second, load.ServiceSummary{
		Service: "svc",
		Flows:   []load.Flow{flow("zone-a", "zone-a", 10, 1, now)},
	}), now.Add(5*time.Millisecond)))
	got := m.Contributors("svc", now)
	if len(got) != 1 || got[0].Replica != "r1" || got[0].Age != 0 {
		t.Errorf("Contributors = %+v, want r1 with age 0", got)
	}
}

// TestMergedUtilizationsFreshness: a report counts while now - Reported
// <= 3 × its interval, and only from a sender whose summary is fresh;
// reports are placed on the owner's clock (the sender's At is skewed).
func TestMergedUtilizationsFreshness(t *testing.T) {
	owner := t0
	senderAt := t0.Add(-time.Hour) // sender clock an hour behind
	ss := load.ServiceSummary{Service: "payments", Endpoints: []load.EndpointUtilization{
		report("pay-1", 0.3, 0, 0, senderAt.Add(-time.Second), time.Second),     // expires 2s after arrival
		report("pay-2", 0.6, 5, 10, senderAt.Add(-time.Second), 10*time.Second), // 29s, but the sender goes stale at 30s
	}}
	m := NewMerged(MergedConfig{})
	must(t, m.Add(summary("ra", senderAt, 10*time.Second, ss), owner))
	ids := func(now time.Time) []string {
		var out []string
		for _, u := range m.Utilizations("payments", now) {
			out = append(out, u.ID)
			if !u.Reported.Equal(owner.Add(-time.Second)) {
				t.Errorf("%s Reported = %v, want on the owner's clock %v", u.ID, u.Reported, owner.Add(-time.Second))
			}
		}
		return out
	}
	for _, tc := range []struct {
		after time.Duration
		want  []string
	}{
		{0, []string{"pay-1", "pay-2"}},
		{2 * time.Second, []string{"pay-1", "pay-2"}},
		{2*time.Second + time.Millisecond, []string{"pay-2"}},
		{29 * time.Second, []string{"pay-2"}},
		{29*time.Second + time.Millisecond, nil},
	} {
		if got := ids(owner.Add(tc.after)); !cmp.Equal(got, tc.want) {
			t.Errorf("%v after arrival: Utilizations = %v, want %v", tc.after, got, tc.want)
		}
	}
	// A newer summary without pay-1 drops it at once.
	ss.Endpoints = ss.Endpoints[1:]
	must(t, m.Add(summary("ra", senderAt.Add(time.Second), 10*time.Second, ss), owner.Add(time.Second)))
	if got := m.Utilizations("payments", owner.Add(time.Second)); len(got) != 1 || got[0].ID != "pay-2" {
		t.Errorf("after a summary without pay-1: %+v, want pay-2 only", got)
	}
}

func TestMergedReportsBound(t *testing.T) {
	m := NewMerged(MergedConfig{MaxReports: 2})
	eps := []load.EndpointUtilization{report("a", 0.1, 0, 0, t0, time.Second), report("b", 0.1, 0, 0, t0, time.Second)}
	must(t, m.Add(summary("ra", t0, time.Second, load.ServiceSummary{Service: "s1", Endpoints: eps}), t0))
	// Replacing s1's reports stays within the bound.
	must(t, m.Add(summary("ra", t0, time.Second, load.ServiceSummary{Service: "s1", Endpoints: eps[:1]}), t0))
	must(t, m.Add(summary("ra", t0, time.Second, load.ServiceSummary{Service: "s2", Endpoints: eps[:1]}), t0))
	err := m.Add(summary("ra", t0, time.Second, load.ServiceSummary{Service: "s3", Endpoints: eps[:1]}), t0)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("third report: %v, want ErrFull", err)
	}
	if got := m.Size().Services; got != 2 {
		t.Errorf("Size().Services = %d after a refused summary, want 2", got)
	}
}

func TestMergedAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMerged(MergedConfig{})
		ack := func(replica string, at time.Time, shards ...load.ShardEpoch) {
			t.Helper()
			s := summary(replica, at, time.Second)
			s.Shards = shards
			must(t, m.Add(s, at))
		}
		before := time.Now()
		time.Sleep(time.Millisecond)
		ack("r1", time.Now(), load.ShardEpoch{Shard: 3, Epoch: 1})
		time.Sleep(time.Second)
		taken := time.Now()
		for _, tc := range []struct {
			name    string
			replica string
			shard   int
			epoch   int64
			since   time.Time
			want    bool
		}{
			{"listed_after_since", "r1", 3, 1, before, true},
			{"arrived_before_since", "r1", 3, 1, taken, false},
			{"other_epoch", "r1", 3, 2, before, false},
			{"other_shard", "r1", 4, 1, before, false},
			{"unknown_sender", "r9", 3, 1, time.Time{}, false},
		} {
			if got := m.Acked(tc.replica, tc.shard, tc.epoch, tc.since); got != tc.want {
				t.Errorf("%s: Acked(%s, %d, %d) = %v, want %v", tc.name, tc.replica, tc.shard, tc.epoch, got, tc.want)
			}
		}

		// r1 still routes shard 3 to the old hold: no ack of epoch 2.
		time.Sleep(time.Second)
		ack("r1", time.Now(), load.ShardEpoch{Shard: 3, Epoch: 1})
		if m.Acked("r1", 3, 2, taken) {
			t.Errorf("Acked(r1, 3, 2) = true while r1 lists epoch 1")
		}
		// It sees the new record: an empty summary listing (3, 2).
		time.Sleep(time.Second)
		ack("r1", time.Now(), load.ShardEpoch{Shard: 3, Epoch: 2}, load.ShardEpoch{Shard: 5, Epoch: 1})
		if !m.Acked("r1", 3, 2, taken) {
			t.Errorf("Acked(r1, 3, 2) = false after r1 listed it")
		}
		// The latest summary counts: one that no longer lists it un-acks.
		time.Sleep(time.Second)
		ack("r1", time.Now(), load.ShardEpoch{Shard: 5, Epoch: 1})
		if m.Acked("r1", 3, 2, taken) {
			t.Errorf("Acked(r1, 3, 2) = true after r1's latest summary stopped listing it")
		}
	})
}

// TestMergedAppendLoads: every service's flows summed over the senders,
// sorted, for services of a few flows and of more than linearRows (the
// indexed path); AppendLoads keeps what dst held and gives what Loads
// gives; a sender's flows in another order sum the same.
func TestMergedAppendLoads(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		czones int // client zones of service "big", 2 zones each
	}{
		{name: "few_rows", czones: 3},
		{name: "at_linear_limit", czones: linearRows / 2},
		{name: "indexed", czones: 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMerged(MergedConfig{})
			var flows []load.Flow
			var want []load.Load
			for c := range tc.czones {
				for _, z := range []string{"za", "zb"} {
					cz := fmt.Sprintf("c%02d", c)
					flows = append(flows, flow(cz, z, float64(c+1), 1, now.Add(-time.Second)))
					want = append(want, mkLoad("big", cz, z, 2*float64(c+1), 2, now.Add(-time.Second)))
				}
			}
			reversed := slices.Clone(flows)
			slices.Reverse(reversed)
			small := load.ServiceSummary{Service: "a-small", Flows: []load.Flow{flow("c00", "za", 7, 1, now.Add(-time.Second))}}
			must(t, m.Add(summary("r1", now, 10*time.Second, load.ServiceSummary{Service: "big", Flows: flows}, small), now))
			must(t, m.Add(summary("r2", now, 10*time.Second, load.ServiceSummary{Service: "big", Flows: reversed}), now))
			want = append([]load.Load{mkLoad("a-small", "c00", "za", 7, 1, now.Add(-time.Second))}, want...)

			if diff := cmp.Diff(want, m.Loads("", now)); diff != "" {
				t.Errorf("Loads (-want +got):\n%s", diff)
			}
			prefix := []load.Load{mkLoad("kept", "x", "y", 1, 1, now)}
			got := m.AppendLoads(slices.Clone(prefix), now)
			if diff := cmp.Diff(append(prefix, want...), got); diff != "" {
				t.Errorf("AppendLoads onto a slice (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want[1:], m.Loads("big", now)); diff != "" {
				t.Errorf(`Loads("big") (-want +got):\n%s`, diff)
			}
		})
	}
}
