package etcdstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

// TestListSplits: a List that splits its ranges (pages of 3 keys, ranges
// of more than 5 keys split) returns exactly the keys, in order, at one
// revision, that a List of one page does, whatever their shape: shared
// prefixes, every key byte, a key equal to a split prefix, and keys
// written around spillway with bytes ValidateKey refuses.
func TestListSplits(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	many := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%04d", prefix, i))
		}
		return out
	}
	tests := []struct {
		name string
		keys []string // under "registrations/"
	}{
		{name: "empty"},
		{name: "one_page", keys: []string{"a/1", "b/2"}},
		{name: "one_service", keys: many("svc-00001/10-0-0-", 40)},
		{name: "skewed_services", keys: append(append(many("svc-00000/e", 30), many("svc-00001/e", 3)...), many("svc-00002/e", 12)...)},
		{name: "every_key_byte", keys: func() []string {
			var out []string
			for _, c := range "+-.0123456789:=@ABCXYZ_abcxyz" {
				out = append(out, many("s"+string(c)+"/", 4)...)
			}
			return out
		}()},
		{name: "key_equal_to_split_prefix", keys: append(many("s/a", 12), "s/a", "s/a0", "s")},
		{name: "bytes_outside_validatekey", keys: append(many("svc/", 10), "svc/ x", "svc/\x01", "svc/~", "svc/\xff\xff", "svc\x00", "s v")},
		// More keys than a split takes below the lowest key byte ('+'):
		// the range before the first key byte is not a prefix range and
		// must be paged, not split again.
		{name: "many_below_lowest_key_byte", keys: append(append(many("svc/ ", 12), many("svc/!", 7)...), many("svc/a", 8)...)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := fmt.Sprintf("/listsplit-%d/", i)
			for _, k := range tt.keys {
				if _, err := cli.Put(context.Background(), prefix+"registrations/"+k, "v-"+k); err != nil {
					t.Fatal(err)
				}
			}
			// A key beside the prefix must stay out.
			if _, err := cli.Put(context.Background(), prefix+"registrationsX", "no"); err != nil {
				t.Fatal(err)
			}
			whole := open(t, srv.Endpoint, prefix)
			defer whole.Close()
			etcdstore.SetListLimits(whole, 10_000, 10_000)
			split := open(t, srv.Endpoint, prefix)
			defer split.Close()
			etcdstore.SetListLimits(split, 3, 5)

			want, wantRev, err := whole.List(context.Background(), "registrations/")
			if err != nil {
				t.Fatal(err)
			}
			got, gotRev, err := split.List(context.Background(), "registrations/")
			if err != nil {
				t.Fatal(err)
			}
			if gotRev != wantRev {
				t.Errorf("List rev = %d, want %d", gotRev, wantRev)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("split List differs from one page (-whole +split):\n%s", diff)
			}
			wantKeys := make([]string, len(tt.keys))
			for i, k := range tt.keys {
				wantKeys[i] = "registrations/" + k
			}
			slices.Sort(wantKeys)
			gotKeys := make([]string, len(got))
			for i, kv := range got {
				gotKeys[i] = kv.Key
				if string(kv.Value) != "v-"+kv.Key[len("registrations/"):] {
					t.Errorf("key %q: value %q", kv.Key, kv.Value)
				}
			}
			if diff := cmp.Diff(wantKeys, gotKeys, cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })); diff != "" {
				t.Errorf("split List keys (-want +got):\n%s", diff)
			}
		})
	}
}
