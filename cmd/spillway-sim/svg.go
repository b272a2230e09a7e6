package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The plot: one row per strategy, two panels per row. Left: same-zone %,
// the optimum and the error rate over time. Right: each zone's
// utilization (offered / real capacity), with capacity (1.0) marked.
// Events are dotted vertical lines. Written by hand: no plotting library.
const (
	svgWidth    = 1100
	svgTitleH   = 56
	svgRowH     = 250
	svgLegendH  = 40
	svgPanelW   = 470
	svgPadLeft  = 60
	svgPadRight = 20
	svgPadTop   = 28
	svgPadBot   = 36
	svgMaxUtil  = 5.0
	svgRightX   = 2*svgPadLeft + svgPanelW + 20 // the right panel's left edge
)

var zoneColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79"}

const (
	colSameZone = "#1f4e9c"
	colOptimum  = "#888888"
	colErrors   = "#d62728"
)

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func esc(s string) string { return xmlEscaper.Replace(s) }

// panel maps data to one plot area.
type panel struct {
	x0, y0, w, h float64 // plot area in SVG pixels
	tmax, ymax   float64 // data ranges: time in seconds, y from 0
}

func (p *panel) px(t float64) float64 { return p.x0 + p.w*t/p.tmax }
func (p *panel) py(v float64) float64 {
	return p.y0 + p.h - p.h*min(max(v, 0), p.ymax)/p.ymax
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// niceStep is a round tick spacing giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtTick(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// axes draws the frame, grid, ticks and labels of p.
func (p *panel) axes(w io.Writer, title, ylabel string, yfmt func(float64) string) {
	fmt.Fprintf(w, `<rect x="%s" y="%s" width="%s" height="%s" fill="#fff" stroke="#444"/>`+"\n", f1(p.x0), f1(p.y0), f1(p.w), f1(p.h))
	ys := niceStep(p.ymax, 5)
	for v := 0.0; v <= p.ymax+1e-9; v += ys {
		y := p.py(v)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e5e5e5"/>`+"\n", f1(p.x0), f1(y), f1(p.x0+p.w), f1(y))
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="end" font-size="10">%s</text>`+"\n", f1(p.x0-4), f1(y+3), esc(yfmt(v)))
	}
	xs := niceStep(p.tmax, 8)
	for t := 0.0; t <= p.tmax+1e-9; t += xs {
		x := p.px(t)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#444"/>`+"\n", f1(x), f1(p.y0+p.h), f1(x), f1(p.y0+p.h+4))
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" font-size="10">%s</text>`+"\n", f1(x), f1(p.y0+p.h+15), fmtTick(t))
	}
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" font-size="10">time (s)</text>`+"\n", f1(p.x0+p.w/2), f1(p.y0+p.h+28))
	fmt.Fprintf(w, `<text x="%s" y="%s" font-size="12" font-weight="bold">%s</text>`+"\n", f1(p.x0), f1(p.y0-8), esc(title))
	fmt.Fprintf(w, `<text transform="translate(%s %s) rotate(-90)" text-anchor="middle" font-size="10">%s</text>`+"\n",
		f1(p.x0-42), f1(p.y0+p.h/2), esc(ylabel))
}

// line draws one series as a staircase: vs[i] holds from ts[i] to
// ts[i]+dt, a step's value being the same all through the step. dash is
// "" for a solid line.
func (p *panel) line(w io.Writer, ts, vs []float64, dt float64, color, dash string) {
	var b strings.Builder
	for i := range ts {
		v := vs[i]
		if math.IsInf(v, 1) || math.IsNaN(v) {
			v = p.ymax
		}
		y := f1(p.py(v))
		fmt.Fprintf(&b, "%s,%s %s,%s ", f1(p.px(ts[i])), y, f1(p.px(ts[i]+dt)), y)
	}
	d := ""
	if dash != "" {
		d = fmt.Sprintf(` stroke-dasharray="%s"`, dash)
	}
	fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n", color, d, strings.TrimSpace(b.String()))
}

// events marks the steps with events as dotted vertical lines.
func (p *panel) events(w io.Writer, run *Run, dt float64, labels bool) {
	for _, st := range run.Steps {
		if len(st.Events) == 0 {
			continue
		}
		x := p.px(float64(st.Index) * dt)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999" stroke-dasharray="2,3"/>`+"\n", f1(x), f1(p.y0), f1(x), f1(p.y0+p.h))
		if labels {
			fmt.Fprintf(w, `<text x="%s" y="%s" font-size="9" fill="#666">%s</text>`+"\n", f1(x+2), f1(p.y0+10), esc(strings.Join(st.Events, "; ")))
		}
	}
}

// legend draws colored swatches with names from (x, y) to the right,
// wrapping at maxX; it returns the number of lines used.
func legend(w io.Writer, x, y, maxX float64, items [][3]string) int {
	x0, lines := x, 1
	for _, it := range items { // name, color, dash
		if wd := 30 + 6.5*float64(len(it[0])); x > x0 && x+wd > maxX {
			x, y = x0, y+16
			lines++
		}
		d := ""
		if it[2] != "" {
			d = fmt.Sprintf(` stroke-dasharray="%s"`, it[2])
		}
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n", f1(x), f1(y), f1(x+18), f1(y), it[1], d)
		fmt.Fprintf(w, `<text x="%s" y="%s" font-size="10">%s</text>`+"\n", f1(x+22), f1(y+3.5), esc(it[0]))
		x += 30 + 6.5*float64(len(it[0]))
	}
	return lines
}

// writeSVG plots the report.
func writeSVG(out io.Writer, rep *Report) error {
	w := bufio.NewWriter(out)
	sc := rep.Scenario
	dt := sc.Step.Seconds()
	tmax := float64(sc.Steps) * dt
	umax := 1.2
	for _, run := range rep.Runs {
		for _, st := range run.Steps {
			for _, zs := range st.Zones {
				if u := zs.Utilization(); !math.IsInf(u, 1) {
					umax = max(umax, u)
				} else {
					umax = svgMaxUtil
				}
			}
		}
	}
	clipped := umax > svgMaxUtil
	umax = min(math.Ceil(umax*2)/2, svgMaxUtil)
	var zs [][3]string
	for z, name := range sc.Zones {
		zs = append(zs, [3]string{"zone " + name, zoneColors[z%len(zoneColors)], ""})
	}
	zs = append(zs, [3]string{"capacity", colErrors, "6,3"})
	zoneX := float64(svgRightX)
	lines := legend(io.Discard, zoneX, 0, svgWidth-svgPadRight, zs)
	height := svgTitleH + len(rep.Runs)*svgRowH + svgLegendH + 16*(lines-1)

	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", svgWidth, height, svgWidth, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="#fafafa"/>`+"\n")
	title := sc.Name
	if title == "" {
		title = "scenario"
	}
	fmt.Fprintf(w, `<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", svgPadLeft, esc("spillway-sim: "+title))
	sub := sc.Description
	if len(sub) > 170 {
		sub = sub[:167] + "..."
	}
	fmt.Fprintf(w, `<text x="%d" y="40" font-size="11" fill="#444">%s</text>`+"\n", svgPadLeft, esc(sub))

	for r := range rep.Runs {
		run := &rep.Runs[r]
		top := float64(svgTitleH + r*svgRowH + svgPadTop)
		h := float64(svgRowH - svgPadTop - svgPadBot)
		left := &panel{x0: svgPadLeft, y0: top, w: svgPanelW, h: h, tmax: tmax, ymax: 100}
		right := &panel{x0: svgRightX, y0: top, w: svgPanelW, h: h, tmax: tmax, ymax: umax}

		ts := make([]float64, len(run.Steps))
		same := make([]float64, len(run.Steps))
		opt := make([]float64, len(run.Steps))
		errs := make([]float64, len(run.Steps))
		for i, st := range run.Steps {
			ts[i] = float64(st.Index) * dt
			same[i] = 100 * st.SameZone
			opt[i] = 100 * st.Optimum
			errs[i] = 100 * st.ErrorRate()
		}
		left.axes(w, run.Strategy+": same-zone and errors", "% of issued traffic", func(v float64) string { return fmtTick(v) + "%" })
		left.events(w, run, dt, true)
		left.line(w, ts, opt, dt, colOptimum, "5,3")
		left.line(w, ts, same, dt, colSameZone, "")
		left.line(w, ts, errs, dt, colErrors, "")

		utitle := run.Strategy + ": utilization per zone (offered / real capacity)"
		if clipped {
			utitle += fmt.Sprintf(", clipped at %g", svgMaxUtil)
		}
		right.axes(w, utitle, "utilization", fmtTick)
		right.events(w, run, dt, false)
		y1 := right.py(1)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-dasharray="6,3"/>`+"\n", f1(right.x0), f1(y1), f1(right.x0+right.w), f1(y1), colErrors)
		for z := range sc.Zones {
			us := make([]float64, len(run.Steps))
			for i, st := range run.Steps {
				us[i] = st.Zones[z].Utilization()
			}
			right.line(w, ts, us, dt, zoneColors[z%len(zoneColors)], "")
		}
	}

	ly := float64(svgTitleH + len(rep.Runs)*svgRowH + 16)
	legend(w, svgPadLeft, ly, zoneX-svgPadLeft, [][3]string{{"same-zone %", colSameZone, ""}, {"optimum", colOptimum, "5,3"}, {"error rate %", colErrors, ""}})
	legend(w, zoneX, ly, svgWidth-svgPadRight, zs)
	fmt.Fprintln(w, "</svg>")
	return w.Flush()
}
