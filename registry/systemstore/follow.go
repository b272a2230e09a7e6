package systemstore

import (
	"context"
	"log/slog"
	"time"
)

// Follow keeps a view of the keys under prefix in step with kv until ctx
// ends: list (a full read of the state, returning the revision it is as
// of) and then every change after that revision to apply, in order. A
// failed list is retried every second; a watch that fails (ErrCompacted,
// a lost connection) is followed by a new list, since changes may have
// been missed. from > 0 starts with a watch from that revision (the
// caller has just listed). It returns when ctx ends.
func Follow(ctx context.Context, kv KV, prefix string, from int64, list func(context.Context) (int64, error), apply func(WatchEvent), log *slog.Logger) {
	rev := from
	if rev <= 0 {
		rev = -1
	}
	for ctx.Err() == nil {
		if rev < 0 {
			var err error
			if rev, err = list(ctx); err != nil {
				rev = -1
				log.Warn("list failed; retrying", "prefix", prefix, "err", err)
				pause(ctx, time.Second)
				continue
			}
		}
		for ev := range kv.Watch(ctx, prefix, rev) {
			if ev.Err != nil {
				if ctx.Err() == nil {
					log.Warn("watch failed; listing again", "prefix", prefix, "err", ev.Err)
				}
				break
			}
			apply(ev)
			rev = ev.Rev
		}
		rev = -1
		pause(ctx, 100*time.Millisecond)
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
