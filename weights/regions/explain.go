package regions

import (
	"slices"
	"time"
)

// Decision is what Order decides for the clients of one region.
type Decision struct {
	// Client is the client region; "" for clients of no region.
	Client string
	// Order lists the regions by priority, 0 first; regions at the same
	// priority (every region at 0, no failover order) share one entry,
	// joined by ",".
	Order   []string
	Outcome Outcome
}

// View is a service's regional rules and what they decide, for explain.
type View struct {
	// Rules are the rules as set, expired ones included.
	Rules Rules
	// Active are the rules that apply at the time of the view.
	Active Rules
	// Present are the regions with a healthy endpoint, sorted.
	Present []string
	// Decisions: one per client region that the service's regions or its
	// rules name, sorted, then clients of no region ("").
	Decisions []Decision
}

// Explain computes the View of a service with endpoints in present and
// rules at now. With a single region and no rule it has no Decisions
// (every locality at priority 0, as before regions).
func Explain(present []string, pref Preference, rules Rules, now time.Time) View {
	v := View{Rules: rules, Active: rules.Active(now), Present: slices.Sorted(slices.Values(present))}
	v.Present = slices.Compact(v.Present)
	if len(v.Present) <= 1 && rules.Empty() {
		return v
	}
	clients := slices.Clone(v.Present)
	for _, d := range rules.Redirects {
		clients = append(clients, d.From)
	}
	slices.Sort(clients)
	clients = append(slices.Compact(clients), "")
	for _, c := range clients {
		prio, out := Order(v.Present, c, pref, rules, now)
		v.Decisions = append(v.Decisions, Decision{Client: c, Order: byPriority(prio), Outcome: out})
	}
	return v
}

// byPriority lists the regions of prio in priority order, those of one
// priority joined by ",".
func byPriority(prio map[string]int) []string {
	top := -1
	for _, p := range prio {
		top = max(top, p)
	}
	out := make([]string, top+1)
	for p := range out {
		var at []string
		for r, q := range prio {
			if q == p {
				at = append(at, r)
			}
		}
		slices.Sort(at)
		for i, r := range at {
			if i > 0 {
				out[p] += ","
			}
			out[p] += r
		}
	}
	return out
}
