package regions

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Preference lists, per client region, the other regions in the order a
// client of that region fails over to them.
type Preference map[string][]string

// ParsePreference reads "r1=r2,r3;r2=r1,r3": per client region, the other
// regions in failover order. Empty is no preference.
func ParsePreference(s string) (Preference, error) {
	p := Preference{}
	if strings.TrimSpace(s) == "" {
		return p, nil
	}
	for i, part := range strings.Split(s, ";") {
		from, list, ok := strings.Cut(strings.TrimSpace(part), "=")
		from = strings.TrimSpace(from)
		if !ok || from == "" {
			return nil, fmt.Errorf("region preference[%d]: %q: want REGION=R1,R2", i, part)
		}
		if _, dup := p[from]; dup {
			return nil, fmt.Errorf("region preference[%d]: region %q is listed twice", i, from)
		}
		var regs []string
		for _, r := range strings.Split(list, ",") {
			r = strings.TrimSpace(r)
			if r == "" {
				return nil, fmt.Errorf("region preference[%d] (%s): empty region", i, from)
			}
			if r == from || slices.Contains(regs, r) {
				return nil, fmt.Errorf("region preference[%d] (%s): %q appears twice", i, from, r)
			}
			regs = append(regs, r)
		}
		p[from] = regs
	}
	return p, nil
}

// Validate checks a preference given as a map (YAML).
func (p Preference) Validate() error {
	for from, regs := range p {
		if from == "" {
			return fmt.Errorf("region preference: empty client region")
		}
		seen := map[string]bool{from: true}
		for j, r := range regs {
			if r == "" || seen[r] {
				return fmt.Errorf("region preference[%s][%d]: %q is empty or appears twice", from, j, r)
			}
			seen[r] = true
		}
	}
	return nil
}

// Redirect sends the clients of region From to region To's endpoints.
type Redirect struct {
	From, To string
	// Until, non-zero, is when the redirect stops applying.
	Until time.Time
}

// Exclude leaves region Region's endpoints out for every client.
type Exclude struct {
	Region string
	// Until, non-zero, is when the exclusion stops applying.
	Until time.Time
}

// Rules are one service's regional redirects and exclusions.
type Rules struct {
	Redirects []Redirect
	Excludes  []Exclude
}

func live(until, now time.Time) bool { return until.IsZero() || now.Before(until) }

// Active returns the rules that apply at now.
func (r Rules) Active(now time.Time) Rules {
	var out Rules
	for _, d := range r.Redirects {
		if live(d.Until, now) {
			out.Redirects = append(out.Redirects, d)
		}
	}
	for _, e := range r.Excludes {
		if live(e.Until, now) {
			out.Excludes = append(out.Excludes, e)
		}
	}
	return out
}

// Empty reports whether r has no rule.
func (r Rules) Empty() bool { return len(r.Redirects) == 0 && len(r.Excludes) == 0 }

// Next is the earliest Until after now, zero when none.
func (r Rules) Next(now time.Time) time.Time {
	var next time.Time
	consider := func(u time.Time) {
		if !u.IsZero() && u.After(now) && (next.IsZero() || u.Before(next)) {
			next = u
		}
	}
	for _, d := range r.Redirects {
		consider(d.Until)
	}
	for _, e := range r.Excludes {
		consider(e.Until)
	}
	return next
}

// Outcome says what Order did beyond the plain order.
type Outcome struct {
	// RedirectedTo is the region the client was sent to, "" when none.
	RedirectedTo string
	// RedirectNoEndpoints: an active redirect of the client's region
	// points at a region without endpoints, so it did not apply.
	RedirectNoEndpoints string
	// Excluded are the regions left out.
	Excluded []string
	// FailOpen: the exclusions would have left no region, so none applied.
	FailOpen bool
}

// Order returns the priority of each region in present (the regions with
// endpoints) for a client in region client, with rules applying at now,
// as a map region → priority; a region absent from the map is left out.
// See the package doc for the order.
func Order(present []string, client string, pref Preference, rules Rules, now time.Time) (map[string]int, Outcome) {
	var out Outcome
	act := rules.Active(now)
	regs := slices.Clone(present)
	slices.Sort(regs)
	regs = slices.Compact(regs)
	excluded := map[string]bool{}
	for _, e := range act.Excludes {
		if slices.Contains(regs, e.Region) {
			excluded[e.Region] = true
		}
	}
	if len(excluded) > 0 && len(excluded) == len(regs) {
		out.FailOpen = true
		clear(excluded)
	}
	kept := regs[:0:0]
	for _, r := range regs {
		if excluded[r] {
			out.Excluded = append(out.Excluded, r)
			continue
		}
		kept = append(kept, r)
	}
	prio := make(map[string]int, len(kept))
	head := client
	if client != "" {
		for _, d := range act.Redirects {
			if d.From != client {
				continue
			}
			if slices.Contains(kept, d.To) {
				head = d.To
				out.RedirectedTo = d.To
			} else {
				out.RedirectNoEndpoints = d.To
			}
			break
		}
	}
	_, hasPref := pref[client]
	if client == "" || (!slices.Contains(regs, client) && !hasPref && out.RedirectedTo == "") {
		for _, r := range kept {
			prio[r] = 0
		}
		return prio, out
	}
	var order []string
	add := func(r string) {
		if slices.Contains(kept, r) && !slices.Contains(order, r) {
			order = append(order, r)
		}
	}
	add(head)
	for _, r := range pref[client] {
		if r != client || out.RedirectedTo == "" {
			add(r)
		}
	}
	for _, r := range kept {
		if r != client || out.RedirectedTo == "" {
			add(r)
		}
	}
	add(client) // a redirected client's own region comes last
	for i, r := range order {
		prio[r] = i
	}
	return prio, out
}
