package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// figure is one measured value at one size.
type figure struct {
	Part   string // set by main
	Size   region // set by main
	Name   string // e.g. "heap per endpoint"
	Value  float64
	Unit   string // e.g. "B", "ms", "/s", "x"
	Target string // e.g. "<= 1024", "" when there is none
	Pass   *bool  // nil when there is no target
	Note   string // how it was read, or why it is extrapolated
}

// judge sets f.Pass from a comparison and returns f.
func (f figure) judge(ok bool) figure { f.Pass = &ok; return f }

// atMost returns f judged against "value <= limit".
func atMost(name string, v float64, unit string, limit float64) figure {
	return figure{Name: name, Value: v, Unit: unit, Target: fmt.Sprintf("≤ %s", num(limit))}.judge(v <= limit)
}

// atLeast returns f judged against "value >= limit".
func atLeast(name string, v float64, unit string, limit float64) figure {
	return figure{Name: name, Value: v, Unit: unit, Target: fmt.Sprintf("≥ %s", num(limit))}.judge(v >= limit)
}

type report struct {
	started time.Time
	head    string // the commit checked out when the run started
	figs    []figure
}

func (r *report) add(f ...figure) { r.figs = append(r.figs, f...) }

// markdown is one table per part: a row per figure, a column per size.
func (r *report) markdown(failed []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Region scale, %s\n\n", r.started.UTC().Format("2006-01-02 15:04 MST"))
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Machine %s, %d cores; spillway at %s.\n", host, runtime.NumCPU(), r.head)
	var partsSeen []string
	for _, f := range r.figs {
		if !contains(partsSeen, f.Part) {
			partsSeen = append(partsSeen, f.Part)
		}
	}
	for _, p := range partsSeen {
		var sizes []region
		var names []string
		cell := map[string]map[float64]figure{}
		for _, f := range r.figs {
			if f.Part != p {
				continue
			}
			if !containsSize(sizes, f.Size) {
				sizes = append(sizes, f.Size)
			}
			if cell[f.Name] == nil {
				names = append(names, f.Name)
				cell[f.Name] = map[float64]figure{}
			}
			cell[f.Name][f.Size.Fraction] = f
		}
		fmt.Fprintf(&b, "\n## %s\n\n| figure | target |", p)
		for _, s := range sizes {
			fmt.Fprintf(&b, " %s (%s endpoints) |", s.Label(), num(float64(s.Endpoints)))
		}
		b.WriteString("\n|---|---|")
		for range sizes {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		var notes []string
		for _, n := range names {
			unit := ""
			for _, f := range cell[n] {
				unit = f.Unit
			}
			label := n
			if unit != "" {
				label += " (" + unit + ")"
			}
			target := ""
			for _, f := range cell[n] {
				target = f.Target
			}
			fmt.Fprintf(&b, "| %s | %s |", label, target)
			for _, s := range sizes {
				f, ok := cell[n][s.Fraction]
				switch {
				case !ok:
					b.WriteString(" – |")
				case f.Pass == nil:
					fmt.Fprintf(&b, " %s |", num(f.Value))
				case *f.Pass:
					fmt.Fprintf(&b, " %s ✓ |", num(f.Value))
				default:
					fmt.Fprintf(&b, " **%s ✗** |", num(f.Value))
				}
				if ok && f.Note != "" {
					notes = append(notes, fmt.Sprintf("%s at %s: %s", n, s.Label(), f.Note))
				}
			}
			b.WriteString("\n")
		}
		for _, n := range notes {
			fmt.Fprintf(&b, "\n- %s", n)
		}
		if len(notes) > 0 {
			b.WriteString("\n")
		}
	}
	if len(failed) > 0 {
		b.WriteString("\n## Parts that failed\n\n")
		for _, f := range failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// num prints v with thousands separators and at most 3 significant
// decimals below 100.
func num(v float64) string {
	switch {
	case v != v:
		return "n/a"
	case v >= 100 || v <= -100:
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []byte
		for i := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		if neg {
			return "-" + string(out)
		}
		return string(out)
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func containsSize(s []region, v region) bool {
	for _, x := range s {
		if x.Fraction == v.Fraction {
			return true
		}
	}
	return false
}

func gitHead() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func goBuild(ctx context.Context, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s (run from the repository root): %w", pkg, err)
	}
	return nil
}
