package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Summary is one run over all its steps.
type Summary struct {
	Strategy string
	// SameZone and Optimum are traffic-weighted means over the steps.
	SameZone, Optimum float64
	// Requests and Errors are totals over the run (rps × step length).
	Requests, Errors float64
	ErrorRate        float64
	// OverloadedSteps counts the steps in which some zone failed requests.
	OverloadedSteps int
	// MaxUtil is the highest utilization any zone reached, in MaxUtilZone
	// at MaxUtilStep.
	MaxUtil                  float64
	MaxUtilZone, MaxUtilStep int
}

// Summary sums up the run.
func (r *Run) Summary(sc *Scenario) Summary {
	s := Summary{Strategy: r.Strategy}
	dt := sc.Step.Seconds()
	for _, st := range r.Steps {
		s.Requests += st.Issued * dt
		s.Errors += st.Errors * dt
		s.SameZone += st.SameZone * st.Issued * dt
		s.Optimum += st.Optimum * st.Issued * dt
		if len(st.Overloaded()) > 0 {
			s.OverloadedSteps++
		}
		for z, zs := range st.Zones {
			if u := zs.Utilization(); u > s.MaxUtil {
				s.MaxUtil, s.MaxUtilZone, s.MaxUtilStep = u, z, st.Index
			}
		}
	}
	if s.Requests > 0 {
		s.SameZone /= s.Requests
		s.Optimum /= s.Requests
		s.ErrorRate = s.Errors / s.Requests
	}
	return s
}

func pct(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

func util(v float64) string {
	if math.IsInf(v, 1) {
		return "inf"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func overloadedNames(sc *Scenario, st *Step) string {
	var names []string
	for _, z := range st.Overloaded() {
		names = append(names, sc.Zones[z])
	}
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ",")
}

// writeTable prints one row per step and strategy, right-aligned, with
// a comment line before the steps that have events.
func writeTable(w io.Writer, rep *Report) error {
	sc := rep.Scenario
	hdr := []string{"step", "time", "strategy", "same-zone", "optimum", "errors"}
	for _, z := range sc.Zones {
		hdr = append(hdr, "util "+z)
	}
	hdr = append(hdr, "overloaded", "fallback")
	rows := [][]string{hdr}
	notes := map[int]string{} // row index -> comment printed before it
	for k := range sc.Steps {
		for r, run := range rep.Runs {
			st := &run.Steps[k]
			if r == 0 && len(st.Events) > 0 {
				notes[len(rows)] = fmt.Sprintf("# step %d: %s", k, strings.Join(st.Events, "; "))
			}
			row := []string{strconv.Itoa(k), st.Time.String(), run.Strategy, pct(st.SameZone), pct(st.Optimum), pct(st.ErrorRate())}
			for _, zs := range st.Zones {
				row = append(row, util(zs.Utilization()))
			}
			rows = append(rows, append(row, overloadedNames(sc, st), st.Fallback))
		}
	}
	return writeAligned(w, rows, notes)
}

// writeAligned prints rows with right-aligned columns two spaces apart.
func writeAligned(w io.Writer, rows [][]string, notes map[int]string) error {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for i, row := range rows {
		if n, ok := notes[i]; ok {
			b.WriteString(n)
			b.WriteByte('\n')
		}
		for j, c := range row {
			if j > 0 {
				b.WriteString("  ")
			}
			b.WriteString(strings.Repeat(" ", width[j]-len(c)))
			b.WriteString(c)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSummary prints one row per strategy and, when spillway ran beside
// others, how it compares.
func writeSummary(w io.Writer, rep *Report) error {
	sc := rep.Scenario
	fmt.Fprintf(w, "\nsummary over %d steps of %v:\n", sc.Steps, sc.Step)
	rows := [][]string{{"strategy", "same-zone", "optimum", "requests", "errors", "error rate", "overloaded steps", "max util"}}
	var sums []Summary
	for i := range rep.Runs {
		s := rep.Runs[i].Summary(sc)
		sums = append(sums, s)
		maxu := "-"
		if s.MaxUtil > 0 {
			maxu = fmt.Sprintf("%s (%s, step %d)", util(s.MaxUtil), sc.Zones[s.MaxUtilZone], s.MaxUtilStep)
		}
		rows = append(rows, []string{s.Strategy, pct(s.SameZone), pct(s.Optimum), fmt.Sprintf("%.0f", s.Requests),
			fmt.Sprintf("%.0f", s.Errors), fmt.Sprintf("%.2f%%", 100*s.ErrorRate), strconv.Itoa(s.OverloadedSteps), maxu})
	}
	if err := writeAligned(w, rows, nil); err != nil {
		return err
	}
	for _, a := range sums {
		if a.Strategy != StrategySpillway {
			continue
		}
		for _, b := range sums {
			if b.Strategy == a.Strategy {
				continue
			}
			errs := "no errors either way"
			switch {
			case b.Errors > 0:
				errs = fmt.Sprintf("errors %+.1f%%", 100*(a.Errors-b.Errors)/b.Errors)
			case a.Errors > 0:
				errs = fmt.Sprintf("errors %.0f vs none", a.Errors)
			}
			d := 100 * (a.SameZone - b.SameZone)
			if math.Abs(d) < 0.05 {
				d = 0 // no "-0.0"
			}
			fmt.Fprintf(w, "%s vs %s: %s, same-zone %+.1f points\n", a.Strategy, b.Strategy, errs, d)
		}
	}
	return nil
}

// csvHeader is the CSV's columns: one row per step and strategy.
func csvHeader(sc *Scenario) []string {
	h := []string{"step", "time_s", "strategy", "issued_rps", "same_zone", "optimum", "error_rate", "errors_rps", "unroutable_rps", "overloaded", "fallback"}
	for _, z := range sc.Zones {
		h = append(h, "util_"+z, "offered_"+z, "capacity_"+z, "errors_"+z, "inflight_"+z, "pods_"+z, "cold_"+z, "local_"+z)
	}
	return append(h, "events")
}

func writeCSV(w io.Writer, rep *Report) error {
	sc := rep.Scenario
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader(sc)); err != nil {
		return err
	}
	f4 := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	for k := range sc.Steps {
		for _, run := range rep.Runs {
			st := &run.Steps[k]
			over := overloadedNames(sc, st)
			if over == "-" {
				over = ""
			}
			row := []string{strconv.Itoa(k), strconv.FormatFloat(st.Time.Seconds(), 'f', -1, 64), run.Strategy,
				f2(st.Issued), f4(st.SameZone), f4(st.Optimum), f4(st.ErrorRate()), f2(st.Errors), f2(st.Unroutable), over, st.Fallback}
			for z, zs := range st.Zones {
				u := "inf"
				if v := zs.Utilization(); !math.IsInf(v, 1) {
					u = f4(v)
				}
				row = append(row, u, f2(zs.Offered), f2(zs.Capacity), f2(zs.Errors), f2(zs.InFlight),
					strconv.Itoa(zs.Pods), strconv.Itoa(zs.Cold), f4(st.Shares[z][z]))
			}
			row = append(row, strings.Join(st.Events, "; "))
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
