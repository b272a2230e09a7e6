package spannerstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spillway/spillway/registry/systemstore"
)

// DefaultElectionTTL is how long an election stays with a holder that
// stopped renewing it.
const DefaultElectionTTL = 5 * time.Second

var _ systemstore.Elector = (*Election)(nil)

// Election is a lease row in SpillwayKV (key name, value {"holder",
// "expires"}), taken and renewed in read-write transactions: a replica
// takes it when it is free, expired, or already its own, and renews it
// every TTL/3. Expiry is judged by each replica's clock, so clocks must
// agree to well under the TTL (NTP does). Spanner's serializable
// read-write transactions make the take exclusive; spannertest, which
// has no transaction isolation, cannot show that (docs/replication.md).
type Election struct {
	kv  *KV
	key string
	ttl time.Duration
	now func() time.Time
}

type holdRecord struct {
	Holder  string `json:"holder"`
	Expires int64  `json:"expires"` // unix nanoseconds, the holder's clock
}

// Election returns the election stored under key name (e.g.
// "election/expiry"); ttl zero means DefaultElectionTTL.
func (s *KV) Election(name string, ttl time.Duration) (*Election, error) {
	if err := systemstore.ValidateKey(name); err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	if ttl <= 0 {
		ttl = DefaultElectionTTL
	}
	return &Election{kv: s, key: name, ttl: ttl, now: time.Now}, nil
}

// hold takes or renews the row for id in one read-write transaction; it
// reports whether id holds it now.
func (e *Election) hold(ctx context.Context, id string) (bool, error) {
	ctx, cancel, err := e.kv.op(ctx)
	if err != nil {
		return false, e.kv.fail("election", e.key, err)
	}
	defer cancel()
	var held bool
	_, err = e.kv.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		held = false
		now := e.now()
		row, err := tx.ReadRow(ctx, kvTable, spanner.Key{e.key}, []string{"Value", "Deleted"})
		switch {
		case spanner.ErrCode(err) == codes.NotFound:
		case err != nil:
			return err
		default:
			var v []byte
			var deleted bool
			if err := row.Columns(&v, &deleted); err != nil {
				return err
			}
			var h holdRecord
			if !deleted && json.Unmarshal(v, &h) == nil && h.Holder != id && h.Expires > now.UnixNano() {
				return nil // another replica holds it
			}
		}
		b, err := json.Marshal(holdRecord{Holder: id, Expires: now.Add(e.ttl).UnixNano()})
		if err != nil {
			return err
		}
		held = true
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.InsertOrUpdate(kvTable, kvCols, []any{e.key, b, false, spanner.CommitTimestamp}),
		})
	})
	if err != nil {
		return false, e.kv.fail("election", e.key, err)
	}
	return held, nil
}

// release deletes the row (a tombstone) if id holds it.
func (e *Election) release(ctx context.Context, id string) error {
	ctx, cancel, err := e.kv.op(ctx)
	if err != nil {
		return e.kv.fail("resign", e.key, err)
	}
	defer cancel()
	_, err = e.kv.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.ReadRow(ctx, kvTable, spanner.Key{e.key}, []string{"Value", "Deleted"})
		if spanner.ErrCode(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		var v []byte
		var deleted bool
		if err := row.Columns(&v, &deleted); err != nil {
			return err
		}
		var h holdRecord
		if deleted || json.Unmarshal(v, &h) != nil || h.Holder != id {
			return nil
		}
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.Update(kvTable, kvCols, []any{e.key, nil, true, spanner.CommitTimestamp}),
		})
	})
	if err != nil {
		return e.kv.fail("resign", e.key, err)
	}
	return nil
}

// Campaign implements systemstore.Elector: it tries every TTL/3 until id
// holds the row, then renews it every TTL/3. The hold is lost when
// another replica holds the row at a renewal, or when renewals have
// failed for two thirds of the TTL (before anyone else may take it), or
// with ctx or Close.
func (e *Election) Campaign(ctx context.Context, id string) (<-chan struct{}, func(), error) {
	every := e.ttl / 3
	for {
		held, err := e.hold(ctx, id)
		if held {
			break
		}
		if ctx.Err() != nil {
			return nil, nil, e.kv.fail("campaign", e.key, ctx.Err())
		}
		if err != nil {
			e.kv.log.Warn("election: take failed", "key", e.key, "err", err)
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, e.kv.fail("campaign", e.key, ctx.Err())
		case <-e.kv.ctx.Done():
			t.Stop()
			return nil, nil, e.kv.fail("campaign", e.key, systemstore.ErrClosed)
		case <-t.C:
		}
	}
	rctx, stop := context.WithCancel(ctx)
	lost := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lost)
		last := e.now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-e.kv.ctx.Done():
				return
			case <-t.C:
			}
			held, err := e.hold(rctx, id)
			switch {
			case held:
				last = e.now()
			case err == nil:
				e.kv.log.Warn("election: taken by another replica", "key", e.key)
				return
			case e.now().Sub(last) > 2*e.ttl/3:
				e.kv.log.Warn("election: renewals failing, giving up the hold", "key", e.key, "err", err)
				return
			}
		}
	}()
	var once sync.Once
	resign := func() {
		once.Do(func() {
			stop()
			<-done
			if err := e.release(context.WithoutCancel(ctx), id); err != nil {
				e.kv.log.Warn("election: resign failed; the hold ends with its TTL", "key", e.key, "err", err)
			}
		})
	}
	return lost, resign, nil
}
