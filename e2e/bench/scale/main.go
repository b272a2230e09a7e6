// Command scale builds the target region of issue 31 (docs/capacity.md) at
// fractions of its size and prints, at each size, the figures a replica
// must meet: memory per endpoint and startup from the store, heartbeats
// and the store writes they cost, xDS streams with go-control-plane side
// by side, the weights cycle, and DNS while registrations churn.
//
// The region at 100 %: 1,000,000 endpoints in 50,000 services over 3
// zones (sizes skewed: region.go), heartbeating every 10 s, 50,000 xDS
// streams on the replica, 1,000 registrations/s of churn, a shared etcd.
// A size of 0.1 is a tenth of every count but the zones and the
// heartbeat interval.
//
// Usage:
//
//	go run ./e2e/bench/scale --sizes 0.1,0.5,1 --parts all --out /tmp/scale.md
//
// Each part runs at each size in turn, on freshly started servers; parts
// that need a spillway process build ./cmd/spillway once (run it from the
// repository root), parts that need etcd start /usr/bin/etcd (--etcd) on
// 127.0.0.1. Every load loop is bounded in count and time. Where this
// machine cannot hold a part at a size, the part says so in its row and
// measures per-unit costs at the largest size it holds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// part is one group of figures, run once per size.
type part struct {
	name string
	doc  string
	run  func(ctx context.Context, env *env, r region) ([]figure, error)
}

// parts is every part in the order they run. Each lives in its own file.
var parts []part

func register(p part) { parts = append(parts, p) }

// env is what parts share within a run.
type env struct {
	TmpDir   string
	EtcdBin  string
	spillway string // built on first use
	Verbose  bool
}

// Spillway builds ./cmd/spillway once into TmpDir and returns its path.
func (e *env) Spillway(ctx context.Context) (string, error) {
	if e.spillway != "" {
		return e.spillway, nil
	}
	bin := e.TmpDir + "/spillway"
	if err := goBuild(ctx, bin, "./cmd/spillway"); err != nil {
		return "", err
	}
	e.spillway = bin
	return bin, nil
}

// Logf prints a progress line on stderr.
func (e *env) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s scale: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	var (
		sizes   = flag.String("sizes", "0.1,0.5,1", "fractions of the target region, comma separated")
		only    = flag.String("parts", "all", "parts to run, comma separated, or all")
		out     = flag.String("out", "", "also write the markdown report to this file")
		etcdBin = flag.String("etcd", "/usr/bin/etcd", "etcd server binary")
		verbose = flag.Bool("v", false, "more progress on stderr")
	)
	flag.Parse()
	fractions, err := parseSizes(*sizes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale: --sizes:", err)
		os.Exit(2)
	}
	chosen, err := choose(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale: --parts:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Children die with the thread that started them (Pdeathsig): keep it.
	runtime.LockOSThread()
	tmp, err := os.MkdirTemp("", "spillway-scale-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(tmp)
	e := &env{TmpDir: tmp, EtcdBin: *etcdBin, Verbose: *verbose}
	// The commit is read now: the binaries are built from the tree as it
	// is when a part first needs them.
	rep := &report{started: time.Now(), head: gitHead()}
	var failed []string
	for _, p := range chosen {
		for _, f := range fractions {
			r := newRegion(f)
			e.Logf("%s at %s: %d endpoints, %d services, %d streams", p.name, r.Label(), r.Endpoints, r.Services, r.Streams)
			figs, err := p.run(ctx, e, r)
			if err != nil {
				e.Logf("%s at %s failed: %v", p.name, r.Label(), err)
				failed = append(failed, fmt.Sprintf("%s at %s: %v", p.name, r.Label(), err))
				if ctx.Err() != nil {
					break
				}
				continue
			}
			for i := range figs {
				figs[i].Part, figs[i].Size = p.name, r
			}
			rep.add(figs...)
		}
	}
	text := rep.markdown(failed)
	fmt.Print(text)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
	}
	if len(failed) > 0 {
		os.Exit(1)
	}
}

func parseSizes(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || v > 1 {
			return nil, fmt.Errorf("%q: want fractions in (0, 1]", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func choose(s string) ([]part, error) {
	if s == "all" {
		return parts, nil
	}
	var out []part
	for _, name := range strings.Split(s, ",") {
		found := false
		for _, p := range parts {
			if p.name == strings.TrimSpace(name) {
				out, found = append(out, p), true
			}
		}
		if !found {
			var names []string
			for _, p := range parts {
				names = append(names, p.name)
			}
			return nil, fmt.Errorf("no part %q (have %s)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}
