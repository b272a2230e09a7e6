package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/e2e/bench/internal/procstat"
	"github.com/spillway/spillway/registry"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// The dns part: one spillway process holds the region, loaded from a
// static file (--static-file, registry/static's format: one atomic batch
// at startup, the fastest honest load), with VM registrations in memory
// (--data-dir ""). While dnsperf (/usr/bin/dnsperf, UDP, the flags of
// e2e/bench/dnsperf.sh: -c 4 -T 2 -q 100, no -Q, queries with EDNS0 at
// 1232 bytes in a -B file, the mix of e2e/bench/gendns: 70 % SRV
// _grpc._tcp.<svc>, 25 % A <svc>, 5 % NXDOMAIN, services drawn
// uniformly) queries the region's services for dnsSeconds, a churn of
// r.Churn registrations a second goes through the registry gRPC API:
// new VM endpoints registered, spread over the services, and once
// churnWindow of them are live each registration is followed by the
// deregistration of the oldest, so the region stays the same size.
//
// spillway's DNS RRL default (1,000 responses a second per /24) would
// drop most of dnsperf's queries, which all come from 127.0.0.1: the run
// exempts 127.0.0.0/8 (--dns-rrl-exempt), as an operator exempts the
// node subnets where caching resolvers sit (e2e/bench/dnsperf.sh's
// other way, a server cookie in every query, is the cookie setup there).

const (
	dnsSeconds     = 20 // dnsperf -l
	dnsCalmSeconds = 10 // dnsperf -l of the run without churn
	dnsQueries     = 20000
	churnWindow    = 5 // seconds of churned registrations kept live
	bufSize        = 1232
)

func init() {
	register(part{
		name: "dns",
		doc:  "dnsperf QPS and loss against a spillway holding the region while registrations churn",
		run:  runDNS,
	})
}

// dnsProfileEnv, when set, makes the run start spillway with --pprof and
// save a 15 s CPU profile taken during the churned dnsperf run to
// $SCALE_DNS_PROFILE.<size>.<binary>.
const dnsProfileEnv = "SCALE_DNS_PROFILE"

func saveDNSProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	return os.WriteFile(path, b, 0o644)
}

// dnsBaselineEnv names a spillway binary (an earlier build) to run the
// same way before the current one, at each size, for a before/after in
// one run; its figures are named with " (baseline)".
const dnsBaselineEnv = "SCALE_DNS_BASELINE"

func runDNS(ctx context.Context, e *env, r region) ([]figure, error) {
	bin, err := e.Spillway(ctx)
	if err != nil {
		return nil, err
	}
	var out []figure
	if base := os.Getenv(dnsBaselineEnv); base != "" {
		figs, err := runDNSWith(ctx, e, r, base)
		if err != nil {
			return nil, fmt.Errorf("baseline %s: %w", base, err)
		}
		for _, f := range figs {
			f.Name += " (baseline)"
			out = append(out, f)
		}
	}
	figs, err := runDNSWith(ctx, e, r, bin)
	return append(out, figs...), err
}

func runDNSWith(ctx context.Context, e *env, r region, bin string) ([]figure, error) {
	dir, err := os.MkdirTemp(e.TmpDir, "dns-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	static := filepath.Join(dir, "region.yaml")
	if err := writeStaticRegion(static, r); err != nil {
		return nil, err
	}
	queries := filepath.Join(dir, "queries.bin")
	if err := writeDNSQueries(queries, r, dnsQueries); err != nil {
		return nil, err
	}
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = benchproc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	dnsAddr, grpcAddr, httpAddr := addrs[0], addrs[1], addrs[2]
	t0 := time.Now()
	args := []string{"--dns-addr", dnsAddr, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--static-file", static, "--data-dir", "", "--dns-rrl-exempt", "127.0.0.0/8"}
	profile := os.Getenv(dnsProfileEnv)
	if profile != "" {
		args = append(args, "--pprof")
	}
	p, err := benchproc.Start(dir, "spillway", bin, args...)
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	if err := p.WaitHTTP(ctx, "http://"+httpAddr+"/readyz", 4*time.Minute); err != nil {
		return nil, fmt.Errorf("spillway with the region: %w\n%s", err, p.Tail())
	}
	loaded := time.Since(t0)
	rss0, _ := procstat.RSSKiB(p.PID())
	e.Logf("dns: %s ready with %d endpoints in %v (RSS %d MiB)", bin, r.Endpoints, loaded.Round(time.Millisecond), rss0/1024)

	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	reg := registryv1.NewRegistryClient(cc)

	// Warm-up: every query once, unmeasured, so the first pass's cache
	// builds are not in the figure (dnsperf -l 2).
	if _, err := runDNSPerf(ctx, dnsAddr, queries, 2); err != nil {
		return nil, err
	}
	// Control: the same load without churn, so the run shows what the
	// churn costs apart from what the size and the machine do.
	calm, err := runDNSPerf(ctx, dnsAddr, queries, dnsCalmSeconds)
	if err != nil {
		return nil, err
	}
	load := benchproc.LoadAvg()
	cctx, cstop := context.WithCancel(ctx)
	churned := make(chan churnResult, 1)
	go func() { churned <- churn(cctx, reg, r, dnsSeconds+2) }()
	time.Sleep(time.Second) // the churn runs before dnsperf starts and after it ends
	profiled := make(chan error, 1)
	if profile != "" {
		go func() {
			profiled <- saveDNSProfile(ctx, "http://"+httpAddr+"/debug/pprof/profile?seconds=15", fmt.Sprintf("%s.%g.%s", profile, r.Fraction, filepath.Base(bin)))
		}()
	} else {
		profiled <- nil
	}
	perf, perr := runDNSPerf(ctx, dnsAddr, queries, dnsSeconds)
	if err := <-profiled; err != nil {
		e.Logf("dns: profile: %v", err)
	}
	cstop()
	ch := <-churned
	if perr != nil {
		return nil, perr
	}
	if ch.err != nil {
		return nil, fmt.Errorf("churn: %w", ch.err)
	}
	rss1, _ := procstat.RSSKiB(p.PID())
	e.Logf("dns: %.0f qps, %.2f %% lost; churn %.0f registrations/s, %.0f deregistrations/s", perf.qps, perf.lostPct, ch.regRate, ch.deregRate)
	note := func(f figure, s string) figure { f.Note = s; return f }
	return []figure{
		note(atLeast("dnsperf QPS under churn", perf.qps, "/s", 50000),
			fmt.Sprintf("dnsperf -m udp -c 4 -T 2 -q 100 -l %d, no -Q, EDNS0 %d, 70 %% SRV / 25 %% A / 5 %% NXDOMAIN over every service; 127.0.0.0/8 RRL-exempt; dnsperf shares the 2 cores", dnsSeconds, bufSize)),
		{Name: "dnsperf queries lost", Value: perf.lostPct, Unit: "%"},
		note(figure{Name: "dnsperf QPS without churn", Value: calm.qps, Unit: "/s"},
			fmt.Sprintf("the same dnsperf for %d s just before, no churn (%.2f %% lost); load average then %s", dnsCalmSeconds, calm.lostPct, load)),
		note(atLeast("churn achieved", ch.regRate, "registrations/s", float64(r.Churn)*0.95),
			fmt.Sprintf("registry gRPC Register, %d live churned endpoints, each new one past them deregistering the oldest (%.0f deregistrations/s)", r.Churn*churnWindow, ch.deregRate)),
		{Name: "churn Register p99", Value: ch.p99.Seconds() * 1000, Unit: "ms"},
		note(figure{Name: "startup with the region", Value: loaded.Seconds(), Unit: "s"}, "--static-file, one batch, until /readyz"),
		{Name: "spillway RSS after", Value: float64(rss1) / 1024, Unit: "MiB"},
	}, nil
}

// writeStaticRegion writes the region as a registry/static file, one
// flow-style line per endpoint; the ids are the loader's default
// (<address>-<port>, 10-0-0-1-8080).
func writeStaticRegion(path string, r region) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(w, "services:")
	last := ""
	r.Walk(func(ep Endpoint) bool {
		if ep.Service != last {
			fmt.Fprintf(w, "  - name: %s\n    endpoints:\n", ep.Service)
			last = ep.Service
		}
		fmt.Fprintf(w, "      - {address: %s, ports: [\"%s=%d\"], zone: %s}\n", ep.Addr, memPortName, ep.Port, ep.Zone)
		return true
	})
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// writeDNSQueries writes n queries in dnsperf's -B format (each a 2-byte
// length and the wire query, RD set, EDNS0 at bufSize), the mix of
// e2e/bench/gendns over the region's services, from a fixed seed.
func writeDNSQueries(path string, r region, n int) error {
	rng := rand.New(rand.NewPCG(31, 2))
	var out []byte
	for i := range n {
		svc := ServiceName(rng.IntN(r.Services))
		m := new(dns.Msg)
		switch x := rng.IntN(100); {
		case x < 70:
			m.SetQuestion("_"+memPortName+"._tcp."+svc+"."+registry.DefaultDomain, dns.TypeSRV)
		case x < 95:
			m.SetQuestion(svc+"."+registry.DefaultDomain, dns.TypeA)
		default:
			m.SetQuestion("nope-"+strconv.Itoa(rng.IntN(r.Services))+"."+registry.DefaultDomain, dns.TypeA)
		}
		m.Id = uint16(i)
		m.SetEdns0(bufSize, false)
		wire, err := m.Pack()
		if err != nil {
			return err
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(wire)))
		out = append(out, wire...)
	}
	return os.WriteFile(path, out, 0o644)
}

type dnsPerfResult struct {
	qps, lostPct float64
}

var (
	reQPS  = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	reLost = regexp.MustCompile(`Queries lost:\s+\d+ \(([0-9.]+)%\)`)
)

func runDNSPerf(ctx context.Context, addr, queries string, secs int) (dnsPerfResult, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return dnsPerfResult{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "/usr/bin/dnsperf", "-s", ap.Addr().String(), "-p", strconv.Itoa(int(ap.Port())),
		"-l", strconv.Itoa(secs), "-m", "udp", "-B", "-d", queries, "-c", "4", "-T", "2", "-q", "100", "-t", "1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return dnsPerfResult{}, fmt.Errorf("dnsperf: %w\n%s", err, out)
	}
	q, l := reQPS.FindSubmatch(out), reLost.FindSubmatch(out)
	if q == nil || l == nil {
		return dnsPerfResult{}, fmt.Errorf("dnsperf: cannot read QPS and loss from:\n%s", out)
	}
	var res dnsPerfResult
	res.qps, _ = strconv.ParseFloat(string(q[1]), 64)
	res.lostPct, _ = strconv.ParseFloat(string(l[1]), 64)
	return res, nil
}

type churnResult struct {
	regRate, deregRate float64
	p99                time.Duration
	err                error
}

// churn registers r.Churn new VM endpoints a second for at most secs
// seconds (or until ctx ends), in 10 ms steps, from 8 workers; endpoint
// k goes to service k % r.Services at 11.x.y.z. Once r.Churn*churnWindow
// churned endpoints are live, each registration also deregisters the
// oldest. Every call is bounded by a 5 s deadline.
func churn(ctx context.Context, reg registryv1.RegistryClient, r region, secs int) churnResult {
	var (
		mu       sync.Mutex
		window   []string // lease ids, oldest first
		lat      []time.Duration
		regs     atomic.Int64
		deregs   atomic.Int64
		firstErr atomic.Pointer[error]
	)
	tokens := make(chan int, r.Churn)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range tokens {
				a := netip.AddrFrom4([4]byte{11, byte(k >> 16), byte(k >> 8), byte(k)})
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				start := time.Now()
				resp, err := reg.Register(cctx, &registryv1.RegisterRequest{
					Service: ServiceName(k % r.Services),
					Endpoint: &registryv1.Endpoint{Address: a.String(),
						Ports:    []*registryv1.Port{{Name: memPortName, Number: 8080}},
						Locality: &registryv1.Locality{Zone: ZoneName(k % regionZones)}},
				})
				d := time.Since(start)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						err = fmt.Errorf("register %d: %w", k, err)
						firstErr.CompareAndSwap(nil, &err)
					}
					continue
				}
				regs.Add(1)
				var old string
				mu.Lock()
				lat = append(lat, d)
				window = append(window, resp.GetLeaseId())
				if len(window) > r.Churn*churnWindow {
					old, window = window[0], window[1:]
				}
				mu.Unlock()
				if old == "" {
					continue
				}
				cctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				_, err = reg.Deregister(cctx, &registryv1.DeregisterRequest{LeaseId: old})
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						err = fmt.Errorf("deregister %s: %w", old, err)
						firstErr.CompareAndSwap(nil, &err)
					}
					continue
				}
				deregs.Add(1)
			}
		})
	}
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	k, limit := 0, r.Churn*secs
	for k < limit && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			// Catch up to the schedule: r.Churn per second since start.
			due := min(int(time.Since(start).Seconds()*float64(r.Churn)), limit)
			for ; k < due && ctx.Err() == nil; k++ {
				select {
				case tokens <- k:
				case <-ctx.Done():
				}
			}
		}
	}
	tick.Stop()
	close(tokens)
	wg.Wait()
	elapsed := time.Since(start)
	res := churnResult{regRate: float64(regs.Load()) / elapsed.Seconds(), deregRate: float64(deregs.Load()) / elapsed.Seconds()}
	if p := firstErr.Load(); p != nil {
		res.err = *p
	}
	if len(lat) > 0 {
		res.p99 = percentile(lat, 0.99)
	} else if res.err == nil {
		res.err = errors.New("no registration completed")
	}
	return res
}

func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
