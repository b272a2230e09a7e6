package clusterversion

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/replica/ownership"
)

// Members is the live replicas as this one sees them; *ownership.Owners
// implements it. Its methods are called from Run's goroutine and from
// HTTP handlers at once.
type Members interface {
	// Members returns the live members, this replica included; the
	// caller does not modify the slice.
	Members() []ownership.Member
	// Settled reports whether Members lists every live member (a
	// replica that just started has not seen them all yet).
	Settled() bool
}

var _ Members = (*ownership.Owners)(nil)

// Next returns the version rec may be raised to now, given the live
// members (this replica included), or 0 and why not: rec is at Current
// (nothing to raise; why is ""), the hold is set, or a live member's
// binary supports only an older version (one whose record names none
// supports Baseline). A version is raised one step at a time.
func Next(rec Record, live []ownership.Member) (next int, why string) {
	if rec.Version >= Current {
		return 0, ""
	}
	if len(live) == 0 {
		return 0, "no live member known"
	}
	next = rec.Version + 1
	var old []string
	for _, m := range live {
		if s := Supported(m); s < next {
			old = append(old, fmt.Sprintf("%s (supports %d)", m.ID, s))
		}
	}
	waits := ""
	if len(old) > 0 {
		waits = fmt.Sprintf("version %d waits for live members whose binary supports only an older version: %s", next, strings.Join(old, ", "))
	}
	if rec.Hold {
		by := ""
		if rec.HoldBy != "" {
			by = " by " + rec.HoldBy
		}
		at := ""
		if !rec.HoldAt.IsZero() {
			at = " since " + rec.HoldAt.UTC().Format(time.RFC3339)
		}
		why = fmt.Sprintf("held%s%s: release the hold to finalise version %d", by, at, next)
		if waits != "" {
			why += "; and " + waits
		}
		return 0, why
	}
	if waits != "" {
		return 0, waits
	}
	return next, ""
}

// next is Next over members, after two more checks, since a version
// once raised is never lowered: members has seen every live member, and
// no member record in the store that has not expired by its own
// "expires" (a member this replica's watch has not heard from yet)
// supports less.
func (v *Versions) next(ctx context.Context, st State, members Members) (int, string) {
	if !members.Settled() {
		return 0, "this replica has not yet seen every live member (it started less than half a member TTL ago)"
	}
	next, why := Next(st.Record, members.Members())
	if next == 0 {
		return 0, why
	}
	stored, err := ownership.StoredMembers(ctx, v.cfg.KV)
	if err != nil {
		return 0, fmt.Sprintf("member records unread: %v", err)
	}
	now := v.cfg.Now()
	var old []string
	for _, m := range stored {
		if s := Supported(m.Member); s < next && m.Expires.After(now) {
			old = append(old, fmt.Sprintf("%s (supports %d, record expires %s)", m.ID, s, m.Expires.UTC().Format(time.RFC3339)))
		}
	}
	if len(old) > 0 {
		return 0, fmt.Sprintf("version %d waits for member records whose binary supports only an older version: %s", next, strings.Join(old, ", "))
	}
	return next, ""
}

// raise writes version next over st, only while the record is still at
// st's revision: of replicas racing, one wins, and the others read the
// winner's record at once.
func (v *Versions) raise(ctx context.Context, st State, raw []byte, next int) error {
	rec := st.Record
	rec.Version, rec.At, rec.By = next, v.cfg.Now().UTC(), v.cfg.ID
	rev, ok, err := v.cfg.KV.(systemstore.CondPutter).PutIf(ctx, Key, encode(raw, rec), st.Rev)
	if err != nil {
		return fmt.Errorf("finalise cluster version %d (%s): %w", next, Key, err)
	}
	if !ok {
		v.trigger() // another replica wrote first: read its record now
		return nil
	}
	from := v.Version()
	v.apply(State{Record: rec, Rev: rev}, "finalise")
	v.setWaiting("")
	v.log.Info("cluster version finalised", "from", from, "to", next, "key", Key, "rev", rev)
	return nil
}
