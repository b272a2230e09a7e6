package registrysync

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/systemstore"
)

// TestChunkStampsIsJSON: the values Flush writes are the JSON of type
// stamps that every release decodes (json.Unmarshal, as applyStamp and
// a previous release do), each at most the limit, together holding
// every stamp once, whatever the lease ids hold.
func TestChunkStampsIsJSON(t *testing.T) {
	hex := func(n int) []stamp {
		out := make([]stamp, n)
		for i := range out {
			out[i] = stamp{id: fmt.Sprintf("%016x", i*7919), ns: 1_700_000_000_000_000_000 + int64(i)}
		}
		return out
	}
	tests := []struct {
		name   string
		stamps []stamp
		limit  int
		values int // at least
	}{
		{name: "one", stamps: hex(1), limit: 1024, values: 1},
		{name: "one_value", stamps: hex(20), limit: 4096, values: 1},
		{name: "chunked", stamps: hex(5000), limit: 4096, values: 40},
		{name: "default_limit", stamps: hex(60000), limit: DefaultValueBytes, values: 3},
		{name: "ids_needing_escapes", stamps: []stamp{{`a"b`, 1}, {`c\d`, 2}, {"<e&f>", 3}, {"g\nh", 4}, {"zoë", 5}, {"", 6}}, limit: 1024, values: 1},
		{name: "negative_and_zero", stamps: []stamp{{"a", -5}, {"b", 0}}, limit: 1024, values: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.stamps)
			slices.SortFunc(in, func(a, b stamp) int { return strings.Compare(a.id, b.id) })
			values, err := chunkStamps(in, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(values) < tt.values {
				t.Errorf("values = %d, want at least %d", len(values), tt.values)
			}
			got := map[string]int64{}
			for i, v := range values {
				if len(v) > tt.limit {
					t.Errorf("value %d: %d bytes, over the limit of %d", i, len(v), tt.limit)
				}
				var s stamps
				if err := json.Unmarshal(v, &s); err != nil {
					t.Fatalf("value %d does not decode: %v\n%.200s", i, err, v)
				}
				for id, ns := range s.Stamps {
					if _, dup := got[id]; dup {
						t.Errorf("lease %q in two values", id)
					}
					got[id] = ns
				}
			}
			want := map[string]int64{}
			for _, s := range tt.stamps {
				want[s.id] = s.ns
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decoded stamps (-want +got):\n%s", diff)
			}
			// What json.Marshal made before (one value) decodes the same.
			if len(values) == 1 {
				old, _ := json.Marshal(stamps{Stamps: want})
				var a, b stamps
				json.Unmarshal(old, &a)
				json.Unmarshal(values[0], &b)
				if !maps.Equal(a.Stamps, b.Stamps) {
					t.Errorf("decodes differently from json.Marshal's value")
				}
			}
		})
	}
}

// BenchmarkFlush: one flush after every lease heartbeated (every shard
// changed), at two fleet sizes.
func BenchmarkFlush(b *testing.B) {
	for _, n := range []int{100_000, 300_000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			m, ids := manyLeases(b, n)
			kv := newDiscardKV()
			r, err := New(Config{KV: kv, Name: "discard", ID: "a"})
			if err != nil {
				b.Fatal(err)
			}
			r.leases = m
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				for _, id := range ids {
					m.Heartbeat(id)
				}
				b.StartTimer()
				if err := r.Flush(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
		})
	}
}

// discardKV takes writes and keeps nothing: what a flush costs without
// the store.
type discardKV struct{ rev int64 }

func newDiscardKV() *discardKV { return &discardKV{} }

func (d *discardKV) Put(context.Context, string, []byte) (int64, error) { d.rev++; return d.rev, nil }
func (d *discardKV) Delete(context.Context, string) (int64, error)      { d.rev++; return d.rev, nil }
func (d *discardKV) Get(_ context.Context, key string) ([]byte, int64, error) {
	return nil, 0, fmt.Errorf("get %s: %w", key, systemstore.ErrNotFound)
}
func (d *discardKV) List(context.Context, string) ([]systemstore.KeyValue, int64, error) {
	return nil, d.rev, nil
}
func (d *discardKV) Watch(ctx context.Context, _ string, _ int64) <-chan systemstore.WatchEvent {
	ch := make(chan systemstore.WatchEvent)
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}
func (d *discardKV) Close() error { return nil }
