package etcdstore

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/spillway/spillway/registry/systemstore"
)

// Bounds of one PutBatch transaction, within etcd's defaults: at most
// --max-txn-ops (128) operations, and key and value bytes well under
// --max-request-bytes (1.5 MiB), which also counts a few bytes of
// framing per operation. A record larger than txnBytes on its own (a
// value up to systemstore.MaxValueLen) goes alone, as a Put would.
const (
	txnOps   = 128
	txnBytes = 1 << 20
)

var _ systemstore.BatchPutter = (*KV)(nil)

// PutBatch implements systemstore.BatchPutter: the records go in etcd
// transactions of at most 128 puts and 1 MiB of keys and values, one
// after the other; each transaction is one revision, all of it or none.
// After a failed transaction none is sent.
func (s *KV) PutBatch(ctx context.Context, puts []systemstore.KeyValue) (int, error) {
	n := 0 // records taken
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		first, last := puts[n].Key, puts[n+len(ops)-1].Key
		what := fmt.Sprintf("%s .. %s (%d records)", first, last, len(ops))
		tctx, cancel, err := s.op(ctx)
		if err != nil {
			return s.fail("put batch", what, err)
		}
		defer cancel()
		if _, err := s.cli.Txn(tctx).Then(ops...).Commit(); err != nil {
			return s.fail("put batch", what, err)
		}
		n += len(ops)
		ops, size = ops[:0], 0
		return nil
	}
	for i, kv := range puts {
		if err := systemstore.ValidatePut(kv.Key, kv.Value); err != nil {
			if ferr := flush(); ferr != nil {
				return n, ferr
			}
			return n, fmt.Errorf("put batch: record %d: %w", i, err)
		}
		b := len(s.prefix) + len(kv.Key) + len(kv.Value)
		if len(ops) == txnOps || (len(ops) > 0 && size+b > txnBytes) {
			if err := flush(); err != nil {
				return n, err
			}
		}
		ops = append(ops, clientv3.OpPut(s.prefix+kv.Key, string(kv.Value)))
		size += b
	}
	if err := flush(); err != nil {
		return n, err
	}
	return n, nil
}
