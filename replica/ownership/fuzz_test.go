package ownership

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeRecord: decodeRecord never panics, and what it accepts has an
// owner, a positive epoch and a shard in range, and survives a round trip.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("ownership/shard/07", []byte(`{"owner":"a","grpc_addr":"10.0.0.1:9000","epoch":3,"since":"2026-01-02T03:04:05Z"}`))
	f.Add("ownership/shard/15", []byte(`{"owner":"b","epoch":1,"since":"2026-01-02T03:04:05Z","released":true}`))
	f.Add("ownership/shard/16", []byte(`{"owner":"b","epoch":1}`))
	f.Add("ownership/shard/7", []byte(`{"owner":"b","epoch":1}`))
	f.Add("ownership/shard/00", []byte(`{"owner":"","epoch":0}`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		s, r, err := decodeRecord(key, b, DefaultShards)
		if err != nil {
			return
		}
		if s < 0 || s >= DefaultShards || r.Owner == "" || r.Epoch <= 0 || key != OwnershipPrefix+ShardKey(s) {
			t.Fatalf("decodeRecord(%q) accepted shard %d record %+v", key, s, r)
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, r2, err := decodeRecord(key, enc, DefaultShards); err != nil || r2.Owner != r.Owner || r2.Epoch != r.Epoch || r2.Released != r.Released {
			t.Fatalf("round trip of %+v = %+v, %v", r, r2, err)
		}
	})
}

// FuzzDecodeMember: decodeMember never panics and accepts only a record
// whose id is its key's.
func FuzzDecodeMember(f *testing.F) {
	f.Add("members/a", []byte(`{"id":"a","grpc_addr":"10.0.0.1:9000","started":"2026-01-02T03:04:05Z","expires":"2026-01-02T03:04:10Z"}`))
	f.Add("members/a", []byte(`{"id":"b"}`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		m, err := decodeMember(key, b)
		if err == nil && MembersPrefix+m.ID != key {
			t.Fatalf("decodeMember(%q) accepted id %q", key, m.ID)
		}
	})
}
