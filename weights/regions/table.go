package regions

import (
	"context"
	"maps"
	"sync"
	"time"
)

// Table holds every service's Rules and tells its caller when the rules
// in force change: at a Set and when a rule expires.
type Table struct {
	now func() time.Time

	// mu guards the fields below.
	mu    sync.Mutex
	rules map[string]Rules
	vers  map[string]uint64
	ver   uint64
	wake  chan struct{} // 1-slot: Set changed the next expiry
}

// NewTable returns an empty Table.
func NewTable() *Table {
	return &Table{now: time.Now, rules: map[string]Rules{}, vers: map[string]uint64{}, wake: make(chan struct{}, 1)}
}

// Set replaces the rules of service (empty Rules: none). It reports
// whether they differ from the previous ones.
func (t *Table) Set(service string, r Rules) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, had := t.rules[service]
	if had && equal(old, r) || !had && r.Empty() {
		return false
	}
	if r.Empty() {
		delete(t.rules, service)
	} else {
		t.rules[service] = r
	}
	t.ver++
	t.vers[service] = t.ver
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return true
}

func equal(a, b Rules) bool {
	if len(a.Redirects) != len(b.Redirects) || len(a.Excludes) != len(b.Excludes) {
		return false
	}
	for i := range a.Redirects {
		x, y := a.Redirects[i], b.Redirects[i]
		if x.From != y.From || x.To != y.To || !x.Until.Equal(y.Until) {
			return false
		}
	}
	for i := range a.Excludes {
		x, y := a.Excludes[i], b.Excludes[i]
		if x.Region != y.Region || !x.Until.Equal(y.Until) {
			return false
		}
	}
	return true
}

// Rules returns service's rules (all of them: Order applies only the
// active ones) and a version that changes whenever the rules in force
// change, expiry included, so it can key a cache.
func (t *Table) Rules(service string) (Rules, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rules[service], t.vers[service]
}

// Services returns the services that have rules.
func (t *Table) Services() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for s := range maps.Keys(t.rules) {
		out = append(out, s)
	}
	return out
}

// expire bumps the version of every service a rule of which expired at or
// before now, and returns them with the next expiry still to come.
func (t *Table) expire(now, last time.Time) ([]string, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var changed []string
	var next time.Time
	for s, r := range t.rules {
		for _, u := range untils(r) {
			if u.After(last) && !u.After(now) {
				changed = append(changed, s)
				t.ver++
				t.vers[s] = t.ver
				break
			}
		}
		if n := r.Next(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return changed, next
}

func untils(r Rules) []time.Time {
	var out []time.Time
	for _, d := range r.Redirects {
		if !d.Until.IsZero() {
			out = append(out, d.Until)
		}
	}
	for _, e := range r.Excludes {
		if !e.Until.IsZero() {
			out = append(out, e.Until)
		}
	}
	return out
}

// Run calls onChange with the services whose rules in force changed
// because a rule expired, at its expiry, until ctx ends. onChange is
// called from Run's goroutine only.
func (t *Table) Run(ctx context.Context, onChange func(services []string)) error {
	last := t.now()
	for {
		now := t.now()
		changed, next := t.expire(now, last)
		last = now
		if len(changed) > 0 {
			onChange(changed)
		}
		var timer <-chan time.Time
		var tm *time.Timer
		if !next.IsZero() {
			tm = time.NewTimer(next.Sub(now))
			timer = tm.C
		}
		select {
		case <-ctx.Done():
			if tm != nil {
				tm.Stop()
			}
			return nil
		case <-t.wake:
		case <-timer:
		}
		if tm != nil {
			tm.Stop()
		}
	}
}
