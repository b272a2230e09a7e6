package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spillway/spillway/weights/zoneaware"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage is a bad command line; run has printed why.
var errUsage = errors.New("usage")

type options struct {
	scenario string
	csv, svg string
	compare  []string // nil: the scenario's
	probe    *float64 // nil: the scenario's
	quiet    bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("spillway-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: spillway-sim [--csv FILE] [--svg FILE] [--compare S1,S2] [--probe SHARE] [--quiet] SCENARIO.yaml")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.csv, "csv", "", "write one row per step and strategy to `FILE`")
	fs.StringVar(&o.svg, "svg", "", "write a plot of same-zone %, errors and utilization to `FILE`")
	fs.Func("compare", "run these `strategies` (comma-separated: spillway, hostcount, static) instead of the scenario's", func(s string) error {
		o.compare = nil
		for name := range strings.SplitSeq(s, ",") {
			name = strings.TrimSpace(name)
			if !slices.Contains(strategyNames, name) {
				return fmt.Errorf("unknown strategy %q, want %s", name, strings.Join(strategyNames, ", "))
			}
			if slices.Contains(o.compare, name) {
				return fmt.Errorf("strategy %q listed twice", name)
			}
			o.compare = append(o.compare, name)
		}
		return nil
	})
	fs.Func("probe", "override the scenario's spillway.probe_share (`SHARE`, 0..0.2)", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return errors.New("want a number")
		}
		if _, err := zoneaware.New(zoneaware.Config{ProbeShare: &v}); err != nil {
			return errors.New("want 0..0.2")
		}
		o.probe = &v
		return nil
	})
	fs.BoolVar(&o.quiet, "quiet", false, "print only the summary, not every step")
	// Flags may come before and after the scenario.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		fs.Usage()
		return nil, errUsage
	}
	o.scenario = pos[0]
	return o, nil
}

// run is the command: exit status 0 on success, 1 when an output cannot
// be written, 2 for a bad command line or scenario.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	if name, ok := strings.CutPrefix(o.scenario, "pid:"); ok {
		return runPID(o, name, stdout, stderr)
	}
	data, err := os.ReadFile(o.scenario)
	if err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 2
	}
	sc, err := ParseScenario(data)
	if err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %s: %v\n", o.scenario, err)
		return 2
	}
	if o.compare != nil {
		sc.Strategies = o.compare
	}
	if o.probe != nil {
		sc.Spillway.ProbeShare = o.probe
	}
	rep, err := Simulate(sc)
	if err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 2
	}
	out := bufio.NewWriter(stdout)
	title := sc.Name
	if title == "" {
		title = o.scenario
	}
	fmt.Fprintf(out, "scenario %s: %s\n", title, sc.Description)
	if !o.quiet {
		if err := writeTable(out, rep); err != nil {
			fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
			return 1
		}
	}
	if err := writeSummary(out, rep); err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 1
	}
	if rep.Subsets != nil {
		if err := writeSubsets(out, rep.Subsets); err != nil {
			fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
			return 1
		}
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 1
	}
	for _, f := range []struct {
		path  string
		write func(io.Writer, *Report) error
	}{{o.csv, writeCSV}, {o.svg, writeSVG}} {
		if f.path == "" {
			continue
		}
		if err := writeFile(f.path, rep, f.write); err != nil {
			fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
			return 1
		}
	}
	return 0
}

func writeFile(path string, rep *Report, write func(io.Writer, *Report) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := write(w, rep); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// runPID runs a built-in scenario of the per-endpoint weights.
func runPID(o *options, name string, stdout, stderr io.Writer) int {
	sc, err := pidScenario(name)
	if err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 2
	}
	if sc.IO != nil {
		return runIO(o, sc, stdout, stderr)
	}
	steps, err := SimulatePID(sc)
	if err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 2
	}
	if err := writePIDTable(stdout, sc, steps); err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 1
	}
	if !writeOutputs(stderr,
		output{o.csv, func(w io.Writer) error { return writePIDCSV(w, sc, steps) }},
		output{o.svg, func(w io.Writer) error { return writePIDSVG(w, sc, steps) }}) {
		return 1
	}
	return 0
}

// output is a file an option names (path "" for none) and what goes in
// it.
type output struct {
	path  string
	write func(io.Writer) error
}

// writeOutputs writes each output whose path is set; an error is
// reported on stderr, naming the file, and makes it return false.
func writeOutputs(stderr io.Writer, outs ...output) bool {
	for _, f := range outs {
		if f.path == "" {
			continue
		}
		fh, err := os.Create(f.path)
		if err == nil {
			err = f.write(fh)
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "spillway-sim: write %s: %v\n", f.path, err)
			return false
		}
	}
	return true
}

// runIO runs a death-spiral scenario under each of its variants.
func runIO(o *options, sc *PIDScenario, stdout, stderr io.Writer) int {
	runs, err := simulateIOAll(sc)
	if err != nil {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 2
	}
	out := bufio.NewWriter(stdout)
	if err := writeIOTable(out, sc, runs, o.quiet); err == nil {
		err = out.Flush()
	} else {
		fmt.Fprintf(stderr, "spillway-sim: %v\n", err)
		return 1
	}
	if !writeOutputs(stderr,
		output{o.csv, func(w io.Writer) error { return writeIOCSV(w, sc, runs) }},
		output{o.svg, func(w io.Writer) error { return writeIOSVG(w, sc, runs) }}) {
		return 1
	}
	return 0
}
