package etcdstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/spillway/spillway/registry/systemstore"
)

// DefaultSessionTTL is the life of an election session whose holder stops
// renewing it (killed, or cut off from etcd): the longest an election
// stays with a dead holder.
const DefaultSessionTTL = 5 * time.Second

var (
	_ systemstore.Elector     = (*Election)(nil)
	_ systemstore.CondDeleter = (*KV)(nil)
)

// DeleteIf implements systemstore.CondDeleter with one transaction: delete
// key if its mod revision is rev.
func (s *KV) DeleteIf(ctx context.Context, key string, rev int64) (bool, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return false, fmt.Errorf("delete: %w", err)
	}
	if rev <= 0 {
		return false, nil // an absent key's mod revision is 0: nothing to delete
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return false, s.fail("delete", key, err)
	}
	defer cancel()
	k := s.prefix + key
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpDelete(k)).Commit()
	if err != nil {
		return false, s.fail("delete", key, err)
	}
	return resp.Succeeded, nil
}

// Election is one named etcd election of the KV's client.
type Election struct {
	kv   *KV
	name string // full etcd key prefix of the election
	ttl  int    // seconds
}

// Election returns the election named name (a key under the KV's prefix,
// e.g. "election/expiry"); a holder that stops renewing loses it after
// sessionTTL (zero means DefaultSessionTTL, at least 1 s).
func (s *KV) Election(name string, sessionTTL time.Duration) (*Election, error) {
	if err := systemstore.ValidateKey(name); err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	if sessionTTL == 0 {
		sessionTTL = DefaultSessionTTL
	}
	secs := int((sessionTTL + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	return &Election{kv: s, name: s.prefix + name, ttl: secs}, nil
}

// Campaign implements systemstore.Elector.
func (e *Election) Campaign(ctx context.Context, id string) (<-chan struct{}, func(), error) {
	if e.kv.closed.Load() {
		return nil, nil, e.kv.fail("campaign", e.name, systemstore.ErrClosed)
	}
	sess, err := concurrency.NewSession(e.kv.cli, concurrency.WithTTL(e.ttl), concurrency.WithContext(ctx))
	if err != nil {
		return nil, nil, e.kv.fail("campaign session", e.name, err)
	}
	el := concurrency.NewElection(sess, e.name)
	if err := el.Campaign(ctx, id); err != nil {
		_ = sess.Close() // revokes the candidate key, or it ends with the session TTL
		return nil, nil, e.kv.fail("campaign", e.name, err)
	}
	lost := make(chan struct{})
	var once sync.Once
	resign := func() {
		once.Do(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.kv.timeout)
			defer cancel()
			_ = el.Resign(rctx)
			_ = sess.Close()
		})
	}
	go func() {
		select {
		case <-sess.Done():
		case <-ctx.Done():
		case <-e.kv.ctx.Done():
		}
		close(lost)
	}()
	return lost, resign, nil
}

var _ systemstore.CondPutter = (*KV)(nil)

// PutIf implements systemstore.CondPutter with one transaction: put key
// if its mod revision is rev (0: the key is absent, whose mod revision
// etcd compares as 0), else read its revision.
func (s *KV) PutIf(ctx context.Context, key string, value []byte, rev int64) (int64, bool, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, false, fmt.Errorf("put: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, false, s.fail("put", key, err)
	}
	defer cancel()
	k := s.prefix + key
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
		Then(clientv3.OpPut(k, string(value))).Else(clientv3.OpGet(k, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return 0, false, s.fail("put", key, err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, true, nil
	}
	var cur int64
	if len(resp.Responses) == 1 {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
			cur = kvs[0].ModRevision
		}
	}
	return cur, false, nil
}
