package exchange

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/replica/exchange/meshv1"
)

// FuzzFromProto feeds FromProto what a peer could send: whatever decodes
// as a Summary. A summary it accepts must survive ToProto/FromProto
// unchanged and be stored by Merged.
func FuzzFromProto(f *testing.F) {
	for _, s := range []*meshv1.Summary{
		ToProto(goodSummary("replica-1", t0)),
		ToProto(goodSummary("spillway-0.pod@x", time.Unix(1, 0))),
		{Replica: "r", AtUnixNano: 1, IntervalMs: 1},
		// A round's acknowledgement with no services.
		{Replica: "r", AtUnixNano: 1, IntervalMs: 1000, Shards: []*meshv1.ShardEpoch{{Shard: 3, Epoch: 2}, {Shard: 99, Epoch: 1}}},
		{Replica: "r", AtUnixNano: 1, IntervalMs: 1000, Shards: []*meshv1.ShardEpoch{{Shard: 3, Epoch: 2}, {Shard: 3, Epoch: 3}}},
		{Replica: "r", AtUnixNano: 1e18, IntervalMs: 1000, Services: []*meshv1.ServiceSummary{{Service: "s", Endpoints: []*meshv1.EndpointReport{
			{Id: "e-1", Cpu: 1.5, InFlight: 1 << 20, Limit: 1 << 20, AgeMs: 3_600_000, IntervalMs: 100},
			{Id: "e-2", IntervalMs: 300_000},
			{Id: "e-3", IntervalMs: 1000, Rps: 1e7, Eps: 1e7, LatencyMs: 3.6e6},
			{Id: "e-4", IntervalMs: 1000, Rps: 0.5, Eps: 0.25, LatencyMs: 0.125},
		}}}},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m meshv1.Summary
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		s, err := FromProto(&m)
		if err != nil {
			return
		}
		again, err := FromProto(ToProto(s))
		if err != nil {
			t.Fatalf("re-encoded accepted summary rejected: %v", err)
		}
		if diff := cmp.Diff(s, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		mg := NewMerged(MergedConfig{})
		if err := mg.Add(s, time.Now()); err != nil {
			t.Fatalf("Merged.Add of an accepted summary: %v", err)
		}
		if got := mg.Size().Services; got != len(s.Services) {
			t.Fatalf("Merged holds %d services, want %d", got, len(s.Services))
		}
		for _, se := range s.Shards {
			if !mg.Acked(s.Replica, se.Shard, se.Epoch, time.Time{}) {
				t.Fatalf("Acked(%s, %d, %d) = false for a listed shard", s.Replica, se.Shard, se.Epoch)
			}
		}
	})
}
