package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

// TestPutBatch: PutBatch writes its records in order in transactions of
// at most 128 records and 1 MiB (each one revision, which is how the
// test sees the transactions), and stops at a record Put would refuse,
// the ones before it written.
func TestPutBatch(t *testing.T) {
	srv := etcdtest.Start(t)
	small := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = 10
		}
		return out
	}
	for i, tc := range []struct {
		name    string
		sizes   []int // value bytes of each record, in order
		badKey  int   // index of a record with an invalid key, or -1
		wantN   int
		wantTxn []int // records per transaction, in order
		wantErr error
	}{
		{name: "empty", sizes: nil, badKey: -1, wantN: 0, wantTxn: nil},
		{name: "one", sizes: small(1), badKey: -1, wantN: 1, wantTxn: []int{1}},
		{name: "ops_bound", sizes: small(300), badKey: -1, wantN: 300, wantTxn: []int{128, 128, 44}},
		{name: "exactly_128", sizes: small(128), badKey: -1, wantN: 128, wantTxn: []int{128}},
		{name: "bytes_bound", sizes: []int{400 << 10, 400 << 10, 400 << 10, 400 << 10, 400 << 10}, badKey: -1, wantN: 5, wantTxn: []int{2, 2, 1}},
		{name: "largest_value_alone", sizes: []int{10, systemstore.MaxValueLen, 10, 10}, badKey: -1, wantN: 4, wantTxn: []int{1, 1, 2}},
		{name: "value_too_large", sizes: append(small(130), systemstore.MaxValueLen+1, 10), badKey: -1, wantN: 130, wantTxn: []int{128, 2}, wantErr: systemstore.ErrInvalid},
		{name: "bad_key_first", sizes: small(3), badKey: 0, wantN: 0, wantTxn: nil, wantErr: systemstore.ErrInvalid},
		{name: "bad_key_midway", sizes: small(5), badKey: 3, wantN: 3, wantTxn: []int{3}, wantErr: systemstore.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			kv := open(t, srv.Endpoint, fmt.Sprintf("/batch-%d/", i))
			defer kv.Close()
			var puts []systemstore.KeyValue
			for j, size := range tc.sizes {
				key := fmt.Sprintf("weights/plan/svc-%04d", j)
				if j == tc.badKey {
					key = "weights//bad"
				}
				puts = append(puts, systemstore.KeyValue{Key: key, Value: bytes.Repeat([]byte{byte('a' + j%26)}, size)})
			}
			n, err := kv.PutBatch(ctx, puts)
			if n != tc.wantN || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("PutBatch = %d, %v; want %d, %v", n, err, tc.wantN, tc.wantErr)
			}
			got, _, err := kv.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.wantN {
				t.Fatalf("records stored = %d, want %d", len(got), tc.wantN)
			}
			var txns []int
			for j, e := range got {
				if e.Key != puts[j].Key || !bytes.Equal(e.Value, puts[j].Value) {
					t.Errorf("record %d = %s (%d bytes), want %s (%d bytes)", j, e.Key, len(e.Value), puts[j].Key, len(puts[j].Value))
				}
				switch {
				case j == 0 || e.Rev > got[j-1].Rev:
					txns = append(txns, 1)
				case e.Rev == got[j-1].Rev:
					txns[len(txns)-1]++
				default:
					t.Errorf("record %d written at revision %d, before record %d (%d)", j, e.Rev, j-1, got[j-1].Rev)
				}
			}
			if diff := cmp.Diff(tc.wantTxn, txns); diff != "" {
				t.Errorf("records per transaction (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPutBatchClosed: a closed store takes nothing.
func TestPutBatchClosed(t *testing.T) {
	srv := etcdtest.Start(t)
	kv := open(t, srv.Endpoint, "/batch-closed/")
	kv.Close()
	n, err := kv.PutBatch(context.Background(), []systemstore.KeyValue{{Key: "a", Value: []byte("v")}})
	if n != 0 || !errors.Is(err, systemstore.ErrClosed) {
		t.Errorf("PutBatch after Close = %d, %v; want 0, ErrClosed", n, err)
	}
}
