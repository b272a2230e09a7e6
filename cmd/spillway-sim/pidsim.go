package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway/spillway/weights/pid"
)

// A PIDScenario is a built-in fleet for the per-endpoint weights
// (weights/pid), run as `spillway-sim pid:NAME`. Endpoint i serves
// share_i × Total requests per step; its CPU utilization is that over its
// capacity Speed_i (1 = the mean pod's capacity at Total/n); a stuck
// endpoint's CPU is Stuck of that, and its in-flight requests sit at the
// limit. Every step each endpoint reports what the previous step measured
// (none at step 0, as after a restart), unless listed in Missing.
type PIDScenario struct {
	Name, Description string
	Steps             int
	Speeds            []float64
	Total             float64 // mean utilization at equal speeds
	Stuck             map[int]float64
	// Cold endpoints join at step ColdAt (ColdAt 0: none).
	Cold   []int
	ColdAt int
	// Missing: step → endpoints whose report is missing at that step.
	Missing map[int][]int
	Metric  pid.Metric
	// IO, when non-nil, makes this a death-spiral scenario run by
	// SimulateIO (guardsim.go) under each of IO.Variants; Total, Stuck,
	// Cold and Missing are then unused.
	IO *IOModel
}

var pidScenarios = []PIDScenario{
	{Name: "heterogeneous", Description: "speeds 1.0/1.3/0.7, round robin at step 0", Steps: 20, Speeds: []float64{1, 1.3, 0.7}, Total: 0.7},
	{Name: "stuck-inflight", Description: "endpoint 2 stuck on I/O: CPU at 20% of its load, in-flight at the limit", Steps: 20, Speeds: []float64{1, 1, 1}, Total: 0.6, Stuck: map[int]float64{2: 0.2}},
	{Name: "stuck-inflight-cpu", Description: "as stuck-inflight, with metric cpu: the stuck endpoint is fed more", Steps: 20, Speeds: []float64{1, 1, 1}, Total: 0.6, Stuck: map[int]float64{2: 0.2}, Metric: pid.MetricCPU},
	{Name: "stuck-io", Description: "endpoint 4's I/O degrades at step 5: it completes 50 rps (half its share) and fails the rest fast, at a tenth of the CPU", Steps: 40, Speeds: []float64{1, 1, 1, 1, 1},
		IO: &IOModel{RPS: 500, Total: 0.5, Endpoint: 4, From: 5, Cap: 50, FailCPU: 0.1, BaseErr: 0.002,
			Latency: 10 * time.Millisecond, SlowLatency: 80 * time.Millisecond, FailLatency: 2 * time.Millisecond, InFlightLimit: 100, Variants: ioVariants}},
	{Name: "cold", Description: "endpoint 3 joins at step 5 with the initial low weight", Steps: 30, Speeds: []float64{1, 1, 1, 1}, Total: 0.6, Cold: []int{3}, ColdAt: 5},
	{Name: "missing", Description: "4 of 10 reports missing at step 10: the round is skipped", Steps: 20, Speeds: []float64{1, 1.2, 0.8, 1, 1.1, 0.9, 1, 1.3, 0.7, 1}, Total: 0.6, Missing: map[int][]int{10: {0, 1, 2, 3}}},
}

// PIDStep is one step of a PID run.
type PIDStep struct {
	Outcome      pid.Outcome
	MissingShare float64
	Weights      []uint32  // pushed for this step (0: not yet present)
	Util         []float64 // measured this step (NaN: not present)
	MaxAvg       float64   // max / mean utilization of present endpoints
	RRMaxAvg     float64   // the same under round robin
}

func (sc *PIDScenario) present(i, k int) bool {
	return !slices.Contains(sc.Cold, i) || k >= sc.ColdAt
}

// utilization of each present endpoint at step k under weights w.
func (sc *PIDScenario) measure(k int, w []float64) (util, cpu []float64, maxAvg float64) {
	util, cpu = make([]float64, len(w)), make([]float64, len(w))
	var sum float64
	n := 0
	for i := range w {
		if sc.present(i, k) {
			sum += w[i]
			n++
		}
	}
	var mx, tot float64
	for i := range w {
		if !sc.present(i, k) || sum == 0 {
			util[i], cpu[i] = math.NaN(), math.NaN()
			continue
		}
		load := w[i] / sum * sc.Total * float64(n) / sc.Speeds[i]
		util[i], cpu[i] = load, load
		if f, ok := sc.Stuck[i]; ok {
			cpu[i] = load * f
		}
		mx, tot = max(mx, load), tot+load
	}
	return util, cpu, mx / (tot / float64(n))
}

// SimulatePID runs sc with the real pid.Controller and round robin side by
// side.
func SimulatePID(sc *PIDScenario) ([]PIDStep, error) {
	c, err := pid.New(pid.Config{Metric: sc.Metric})
	if err != nil {
		return nil, err
	}
	n := len(sc.Speeds)
	const step = 10 * time.Second
	t0 := time.Unix(0, 0).UTC()
	var st pid.State
	var res pid.Result
	var lastUtil []float64
	var lastReport []time.Time
	steps := make([]PIDStep, 0, sc.Steps)
	for k := range sc.Steps {
		now := t0.Add(time.Duration(k) * step)
		in := &pid.Input{Now: now}
		for i := range n {
			if !sc.present(i, k) {
				continue
			}
			e := pid.Endpoint{ID: "ep" + strconv.Itoa(i)}
			if lastUtil != nil && !math.IsNaN(lastUtil[i]) && !slices.Contains(sc.Missing[k], i) {
				e.Utilization, e.Reported = lastUtil[i], lastReport[i]
			}
			in.Endpoints = append(in.Endpoints, e)
		}
		c.Compute(&st, in, &res)
		w := make([]float64, n)
		ps := PIDStep{Outcome: res.Outcome, MissingShare: res.MissingShare, Weights: make([]uint32, n)}
		j := 0
		for i := range n {
			if sc.present(i, k) {
				ps.Weights[i] = res.Endpoints[j].Weight
				w[i] = float64(ps.Weights[i])
				j++
			}
		}
		util, cpu, ma := sc.measure(k, w)
		rr := make([]float64, n)
		for i := range rr {
			rr[i] = 1
		}
		_, _, ps.RRMaxAvg = sc.measure(k, rr)
		ps.Util, ps.MaxAvg = util, ma
		// What this step measured is the next step's report.
		lastUtil, lastReport = make([]float64, n), make([]time.Time, n)
		for i := range n {
			inflight := 0.0
			if !math.IsNaN(util[i]) {
				inflight = util[i] * 50
				if _, ok := sc.Stuck[i]; ok {
					inflight = 100
				}
			}
			lastUtil[i] = pid.Utilization(cpu[i], inflight, 100, c.Metric())
			if math.IsNaN(util[i]) {
				lastUtil[i] = math.NaN()
			}
			lastReport[i] = now.Add(step - time.Second)
		}
		steps = append(steps, ps)
	}
	return steps, nil
}

func pidScenario(name string) (*PIDScenario, error) {
	var names []string
	for i := range pidScenarios {
		if pidScenarios[i].Name == name {
			return &pidScenarios[i], nil
		}
		names = append(names, pidScenarios[i].Name)
	}
	return nil, fmt.Errorf("unknown pid scenario %q, want pid:%s", name, strings.Join(names, ", pid:"))
}

func writePIDTable(w io.Writer, sc *PIDScenario, steps []PIDStep) error {
	fmt.Fprintf(w, "scenario pid:%s: %s\n", sc.Name, sc.Description)
	fmt.Fprintf(w, "%4s  %-15s  %7s  %8s  %8s  %s\n", "step", "outcome", "missing", "max/avg", "rr", "weights / utilization")
	for k, s := range steps {
		var parts []string
		for i := range s.Weights {
			if s.Weights[i] == 0 {
				parts = append(parts, "-")
				continue
			}
			parts = append(parts, fmt.Sprintf("%d/%.2f", s.Weights[i], s.Util[i]))
		}
		if _, err := fmt.Fprintf(w, "%4d  %-15s  %6.0f%%  %8.3f  %8.3f  %s\n", k, s.Outcome, 100*s.MissingShare, s.MaxAvg, s.RRMaxAvg, strings.Join(parts, " ")); err != nil {
			return err
		}
	}
	return nil
}

func writePIDCSV(w io.Writer, sc *PIDScenario, steps []PIDStep) error {
	h := []string{"step", "outcome", "missing_share", "max_avg", "rr_max_avg"}
	for i := range sc.Speeds {
		h = append(h, fmt.Sprintf("weight_%d", i), fmt.Sprintf("util_%d", i))
	}
	if _, err := fmt.Fprintln(w, strings.Join(h, ",")); err != nil {
		return err
	}
	for k, s := range steps {
		row := []string{strconv.Itoa(k), s.Outcome.String(), strconv.FormatFloat(s.MissingShare, 'f', 3, 64), strconv.FormatFloat(s.MaxAvg, 'f', 4, 64), strconv.FormatFloat(s.RRMaxAvg, 'f', 4, 64)}
		for i := range s.Weights {
			u := ""
			if !math.IsNaN(s.Util[i]) {
				u = strconv.FormatFloat(s.Util[i], 'f', 4, 64)
			}
			row = append(row, strconv.FormatUint(uint64(s.Weights[i]), 10), u)
		}
		if _, err := fmt.Fprintln(w, strings.Join(row, ",")); err != nil {
			return err
		}
	}
	return nil
}

// writePIDSVG plots max/avg utilization per step, PID against round robin.
func writePIDSVG(w io.Writer, sc *PIDScenario, steps []PIDStep) error {
	const W, H, x0, y0, pw, ph = 640, 320, 60, 30, 540, 240
	ymax := 1.0
	for _, s := range steps {
		ymax = max(ymax, s.MaxAvg, s.RRMaxAvg)
	}
	ymax = math.Ceil(ymax*10) / 10
	px := func(k int) float64 { return x0 + pw*float64(k)/float64(max(1, len(steps)-1)) }
	py := func(v float64) float64 { return y0 + ph*(ymax-v)/(ymax-1+1e-9) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="18">pid:%s — max/avg utilization per step</text>`+"\n", x0, esc(sc.Name))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y0, pw, ph)
	for v := 1.0; v <= ymax+1e-9; v += 0.1 {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.1f</text>`+"\n", x0-4, py(v)+4, v)
	}
	for _, l := range []struct {
		color string
		get   func(PIDStep) float64
	}{{"#1f77b4", func(s PIDStep) float64 { return s.MaxAvg }}, {"#d62728", func(s PIDStep) float64 { return s.RRMaxAvg }}} {
		var pts []string
		for k, s := range steps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(k), py(l.get(s))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", l.color, strings.Join(pts, " "))
	}
	for k, s := range steps {
		if s.Outcome != pid.OutcomeComputed {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999" stroke-dasharray="3,3"><title>step %d: %s</title></line>`+"\n", px(k), y0, px(k), y0+ph, k, s.Outcome)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#1f77b4">pid</text><text x="%d" y="%d" fill="#d62728">round robin</text>`+"\n", x0, H-20, x0+60, H-20)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
