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

// An IOModel is a fleet of equal endpoints serving RPS requests per second
// in which one endpoint's I/O degrades, for the death-spiral scenario
// (pid:stuck-io, run by SimulateIO). Endpoint i is offered λ_i = RPS ×
// share_i. A healthy endpoint serves them all: CPU = Total × λ_i / (RPS/n)
// (Total at equal weights), errors BaseErr × λ_i, latency Latency / (1 −
// min(CPU, 0.9)). From step From, endpoint Endpoint's I/O completes at
// most Cap requests per second: served = min(λ, Cap) wait SlowLatency on
// it, the rest fail fast (FailLatency) at FailCPU of a served request's
// CPU, so the more it is sent the more it fails, and its CPU stays low.
// In flight (Little's law, λ × latency) is reported against a limit of
// InFlightLimit, so that the default metric max(CPU, in-flight/limit)
// sees what the endpoint would report; a fast failure holds nothing in
// flight.
type IOModel struct {
	RPS, Total                        float64
	Endpoint, From                    int
	Cap, FailCPU, BaseErr             float64
	Latency, SlowLatency, FailLatency time.Duration
	InFlightLimit                     float64
	Variants                          []IOVariant
}

// An IOVariant is one run of an IOModel: the controller's brakes.
type IOVariant struct {
	Name, Description string
	Config            pid.Config
}

var guardOff, guardOn = false, true

// ioVariants are the three runs of pid:stuck-io: utilization alone (the
// controller before the guard), the A58 penalty alone, and the default
// (penalty and guard).
var ioVariants = []IOVariant{
	{"off", "utilization only (guard and penalty off)", pid.Config{ErrorGuard: &guardOff, ErrorPenalty: new(0.0)}},
	{"penalty", "the A58 error penalty alone (guard off)", pid.Config{ErrorGuard: &guardOff}},
	{"guard", "penalty and guard (the default)", pid.Config{ErrorGuard: &guardOn}},
}

// IOStep is one step of one variant.
type IOStep struct {
	Outcome pid.Outcome
	Weights []uint32
	// Median is the lower median of Weights; Guard the stuck endpoint's.
	Median uint32
	Guard  pid.Guard
	// Offered, Failed: requests per second each endpoint was sent and
	// failed this step; CPU and Latency (ms) as measured.
	Offered, Failed, CPU, Latency []float64
	// StuckRate is the stuck endpoint's error rate, ServiceRate the
	// service's (failed / offered over all endpoints).
	StuckRate, ServiceRate float64
}

// ioMeasure is what endpoint i measures at step k when offered lambda.
func (m *IOModel) ioMeasure(n, i, k int, lambda float64) (cpu, failed, latencyMs, inflight float64) {
	perEndpoint := m.RPS / float64(n)
	lat := m.Latency.Seconds()
	if i != m.Endpoint || k < m.From {
		cpu = m.Total * lambda / perEndpoint
		failed = m.BaseErr * lambda
		l := lat / (1 - min(cpu, 0.9))
		return cpu, failed, 1000 * l, lambda * l
	}
	served := min(lambda, m.Cap)
	fast := lambda - served
	cpu = m.Total * (served + m.FailCPU*fast) / perEndpoint
	failed = fast + m.BaseErr*served
	slow, quick := m.SlowLatency.Seconds(), m.FailLatency.Seconds()
	inflight = served*slow + fast*quick
	if lambda > 0 {
		latencyMs = 1000 * inflight / lambda
	}
	return cpu, failed, latencyMs, inflight
}

// SimulateIO runs sc's IOModel under v with the real pid.Controller: each
// step the controller weighs the reports of the previous step (none at
// step 0), then the endpoints are offered the traffic by the new weights.
func SimulateIO(sc *PIDScenario, v IOVariant) ([]IOStep, error) {
	m := sc.IO
	cfg := v.Config
	cfg.Metric = sc.Metric
	c, err := pid.New(cfg)
	if err != nil {
		return nil, err
	}
	n := len(sc.Speeds)
	const step = 10 * time.Second
	t0 := time.Unix(0, 0).UTC()
	var st pid.State
	var res pid.Result
	var last []pid.Endpoint
	steps := make([]IOStep, 0, sc.Steps)
	for k := range sc.Steps {
		now := t0.Add(time.Duration(k) * step)
		in := &pid.Input{Now: now}
		for i := range n {
			e := pid.Endpoint{ID: "ep" + strconv.Itoa(i)}
			if last != nil {
				e = last[i]
			}
			in.Endpoints = append(in.Endpoints, e)
		}
		c.Compute(&st, in, &res)
		s := IOStep{Outcome: res.Outcome, Weights: make([]uint32, n), Offered: make([]float64, n), Failed: make([]float64, n),
			CPU: make([]float64, n), Latency: make([]float64, n), Guard: res.Endpoints[m.Endpoint].Guard}
		var sum float64
		for i, e := range res.Endpoints {
			s.Weights[i] = e.Weight
			sum += float64(e.Weight)
		}
		sorted := slices.Clone(s.Weights)
		slices.Sort(sorted)
		s.Median = sorted[(n-1)/2]
		last = make([]pid.Endpoint, n)
		var offered, failed float64
		for i := range n {
			lambda := m.RPS * float64(s.Weights[i]) / sum
			cpu, f, lat, inflight := m.ioMeasure(n, i, k, lambda)
			s.Offered[i], s.Failed[i], s.CPU[i], s.Latency[i] = lambda, f, cpu, lat
			offered, failed = offered+lambda, failed+f
			// What this step measured is the next step's report.
			last[i] = pid.Endpoint{ID: "ep" + strconv.Itoa(i), Reported: now.Add(step - time.Second),
				Utilization: pid.Utilization(cpu, inflight, m.InFlightLimit, c.Metric()),
				RPS:         lambda, EPS: f, LatencyMs: lat}
		}
		if o := s.Offered[m.Endpoint]; o > 0 {
			s.StuckRate = s.Failed[m.Endpoint] / o
		}
		if offered > 0 {
			s.ServiceRate = failed / offered
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// IORun is one variant's steps.
type IORun struct {
	Variant IOVariant
	Steps   []IOStep
}

// simulateIOAll runs every variant of sc.
func simulateIOAll(sc *PIDScenario) ([]IORun, error) {
	var runs []IORun
	for _, v := range sc.IO.Variants {
		steps, err := SimulateIO(sc, v)
		if err != nil {
			return nil, fmt.Errorf("variant %s: %w", v.Name, err)
		}
		runs = append(runs, IORun{v, steps})
	}
	return runs, nil
}

// ioSummary is one variant's run in numbers.
type ioSummary struct {
	// MaxRatio and FinalRatio: the stuck endpoint's weight over the median
	// weight, its largest from step From on and at the last step.
	MaxRatio, FinalRatio float64
	// StuckRate and ServiceRate: the stuck endpoint's and the service's
	// error rate from step From on; Failed the requests failed then.
	StuckRate, ServiceRate, Failed float64
	// Guarded: the steps in which the guard held the stuck endpoint.
	Guarded int
}

func summarizeIO(sc *PIDScenario, steps []IOStep) ioSummary {
	m := sc.IO
	var s ioSummary
	var stuckOff, stuckFail, off float64
	const secs = 10 // a step
	for k := m.From; k < len(steps); k++ {
		st := steps[k]
		r := float64(st.Weights[m.Endpoint]) / float64(st.Median)
		s.MaxRatio, s.FinalRatio = max(s.MaxRatio, r), r
		for i := range st.Offered {
			off += st.Offered[i] * secs
			s.Failed += st.Failed[i] * secs
		}
		stuckOff += st.Offered[m.Endpoint] * secs
		stuckFail += st.Failed[m.Endpoint] * secs
		if st.Guard != pid.GuardNone {
			s.Guarded++
		}
	}
	if stuckOff > 0 {
		s.StuckRate = stuckFail / stuckOff
	}
	if off > 0 {
		s.ServiceRate = s.Failed / off
	}
	return s
}

// writeIOTable prints, per step, each variant's stuck endpoint weight over
// the median weight, its error rate and the service's, then a summary.
func writeIOTable(w io.Writer, sc *PIDScenario, runs []IORun, quiet bool) error {
	m := sc.IO
	fmt.Fprintf(w, "scenario pid:%s: %s\n", sc.Name, sc.Description)
	for _, r := range runs {
		fmt.Fprintf(w, "  %-8s %s\n", r.Variant.Name, r.Variant.Description)
	}
	if !quiet {
		fmt.Fprintf(w, "endpoint %d: weight/median (w/med), its error rate (err), guard; svc: the service's error rate\n", m.Endpoint)
		var line strings.Builder
		flush := func() {
			fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
			line.Reset()
		}
		fmt.Fprintf(&line, "%4s", "step")
		for _, r := range runs {
			fmt.Fprintf(&line, "  %*s %6s %6s %-7s", 13, r.Variant.Name+" w/med", "err", "svc", "guard")
		}
		flush()
		for k := range runs[0].Steps {
			if k == m.From {
				fmt.Fprintf(w, "# step %d: endpoint %d's I/O degrades\n", k, m.Endpoint)
			}
			fmt.Fprintf(&line, "%4d", k)
			for _, r := range runs {
				s := r.Steps[k]
				g := s.Guard.String()
				if g == "" {
					g = "-"
				}
				fmt.Fprintf(&line, "  %13.2f %5.1f%% %5.1f%% %-7s", float64(s.Weights[m.Endpoint])/float64(s.Median), 100*s.StuckRate, 100*s.ServiceRate, g)
			}
			flush()
		}
	}
	fmt.Fprintf(w, "\nfrom step %d (%d steps of 10s):\n", m.From, len(runs[0].Steps)-m.From)
	fmt.Fprintf(w, "%8s  %9s  %11s  %10s  %12s  %15s  %7s\n", "variant", "max w/med", "final w/med", "its errors", "service errs", "failed requests", "guarded")
	for _, r := range runs {
		s := summarizeIO(sc, r.Steps)
		if _, err := fmt.Fprintf(w, "%8s  %9.2f  %11.2f  %9.1f%%  %11.2f%%  %15.0f  %7d\n", r.Variant.Name, s.MaxRatio, s.FinalRatio, 100*s.StuckRate, 100*s.ServiceRate, s.Failed, s.Guarded); err != nil {
			return err
		}
	}
	return nil
}

// writeIOCSV writes one row per step and variant.
func writeIOCSV(w io.Writer, sc *PIDScenario, runs []IORun) error {
	h := []string{"step", "variant", "outcome", "median", "stuck_guard", "stuck_error_rate", "service_error_rate"}
	for i := range sc.Speeds {
		h = append(h, fmt.Sprintf("weight_%d", i), fmt.Sprintf("rps_%d", i), fmt.Sprintf("failed_%d", i), fmt.Sprintf("cpu_%d", i), fmt.Sprintf("latency_ms_%d", i))
	}
	if _, err := fmt.Fprintln(w, strings.Join(h, ",")); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	for k := range runs[0].Steps {
		for _, r := range runs {
			s := r.Steps[k]
			row := []string{strconv.Itoa(k), r.Variant.Name, s.Outcome.String(), strconv.FormatUint(uint64(s.Median), 10), s.Guard.String(), f(s.StuckRate), f(s.ServiceRate)}
			for i := range s.Weights {
				row = append(row, strconv.FormatUint(uint64(s.Weights[i]), 10), f(s.Offered[i]), f(s.Failed[i]), f(s.CPU[i]), f(s.Latency[i]))
			}
			if _, err := fmt.Fprintln(w, strings.Join(row, ",")); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeIOSVG plots the stuck endpoint's weight over the median weight per
// step, one line per variant, with 1 (the median) marked.
func writeIOSVG(w io.Writer, sc *PIDScenario, runs []IORun) error {
	const W, H, x0, y0, pw, ph = 640, 320, 60, 30, 540, 240
	ymax := 1.0
	for _, r := range runs {
		for _, s := range r.Steps {
			ymax = max(ymax, float64(s.Weights[sc.IO.Endpoint])/float64(s.Median))
		}
	}
	ymax = math.Ceil(ymax)
	steps := len(runs[0].Steps)
	px := func(k int) float64 { return x0 + pw*float64(k)/float64(max(1, steps-1)) }
	py := func(v float64) float64 { return y0 + ph*(ymax-v)/ymax }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="18">pid:%s — endpoint %d's weight / the median weight</text>`+"\n", x0, esc(sc.Name), sc.IO.Endpoint)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y0, pw, ph)
	for v := 0.0; v <= ymax+1e-9; v++ {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", x0-4, py(v)+4, v)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" stroke-dasharray="4,3"/>`+"\n", x0, py(1), x0+pw, py(1))
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999" stroke-dasharray="3,3"><title>step %d: I/O degrades</title></line>`+"\n", px(sc.IO.From), y0, px(sc.IO.From), y0+ph, sc.IO.From)
	colors := []string{"#d62728", "#ff7f0e", "#1f77b4"}
	for j, r := range runs {
		var pts []string
		for k, s := range r.Steps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(k), py(float64(s.Weights[sc.IO.Endpoint])/float64(s.Median))))
		}
		c := colors[j%len(colors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", x0+90*j, H-20, c, esc(r.Variant.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
