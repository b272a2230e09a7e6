package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway/spillway/cmd/spillway/internal/demo"

	"github.com/spillway/spillway/internal/httpjson"
)

// demoConfig is what `spillway demo` is given.
type demoConfig struct {
	Scenario                    string
	DNSAddr, GRPCAddr, HTTPAddr string
	RPS                         float64
	LRSInterval, Weights        time.Duration
	SlowStartRamp               time.Duration
	LogLevel                    string
	// ready, when set, is called once the server and the fleet run (tests).
	ready func(demoInfo)
}

// demoInfo is what a running demo tells its caller.
type demoInfo struct {
	DNSAddr, GRPCAddr, HTTPAddr string
	Token, Dir                  string
	Fleet                       *demo.Fleet
}

// demoMain runs `spillway demo [flags]` and `spillway demo event NAME`.
func demoMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "event" {
		return demoEventMain(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("spillway demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c demoConfig
	fs.StringVar(&c.Scenario, "scenario", "default", "what the demo shows, after cmd/spillway-sim/scenarios: "+strings.Join(demo.ScenarioNames(), ", "))
	fs.StringVar(&c.DNSAddr, "dns-addr", "127.0.0.1:8053", "DNS listen address")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", "127.0.0.1:18000", "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:18080", "HTTP listen address (the page, the JSON API)")
	fs.Float64Var(&c.RPS, "rps", 100, "requests per second the clients send the main service (payments gets a quarter, inventory a tenth); at most 1000")
	fs.DurationVar(&c.LRSInterval, "lrs-interval", 2*time.Second, "load reporting interval asked of the clients (the server's default is 10s)")
	fs.DurationVar(&c.Weights, "weights-interval", 2*time.Second, "how often zone-aware weights are recomputed (the server's default is 10s)")
	fs.DurationVar(&c.SlowStartRamp, "slow-start-ramp", 8*time.Second, "how long a new endpoint takes to earn full trust by time alone (twice that while it serves; the server's default is 60s)")
	fs.StringVar(&c.LogLevel, "log-level", "warn", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "spillway demo: unexpected argument %q (flags start with --; events: spillway demo event NAME)\n", fs.Arg(0))
		return 2
	}
	if err := runDemo(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "spillway demo: %v\n", err)
		return 1
	}
	return 0
}

// runDemo starts the server in-process on a temporary data dir, then the
// fleet, until ctx ends; it stops the fleet first (its agents deregister
// while the server is up), then the server, and removes the temp dir.
func runDemo(ctx context.Context, c demoConfig, stdout, stderr io.Writer) (err error) {
	sc, err := demo.LookupScenario(c.Scenario)
	if err != nil {
		return fmt.Errorf("--%w", err)
	}
	sweepDemoDirs(stderr)
	dir, err := makeDemoDir()
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = rerr
		}
	}()
	var tok [16]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	tokenFile := filepath.Join(dir, "admin-token")
	staticFile := filepath.Join(dir, "static.yaml")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(staticFile, demo.StaticFile(), 0o600); err != nil {
		return err
	}

	cfg := defaultConfig()
	cfg.DNSAddr, cfg.GRPCAddr, cfg.HTTPAddr = c.DNSAddr, c.GRPCAddr, c.HTTPAddr
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.AdminTokenFile = tokenFile
	cfg.StaticFile = staticFile
	cfg.LogLevel = c.LogLevel
	cfg.XDS.LRSInterval, cfg.XDS.WeightsInterval = c.LRSInterval, c.Weights
	cfg.ShutdownGrace = 2 * time.Second
	cfg.hooks.slowStartRamp = c.SlowStartRamp
	if err := cfg.validate(); err != nil {
		return err
	}
	log := cfg.logger(stderr)

	var fleet atomic.Pointer[demo.Fleet]
	srvCtx, stopSrv := context.WithCancel(context.Background())
	defer stopSrv()
	fleetCtx, stopFleet := context.WithCancel(ctx)
	defer stopFleet()
	var fleetWG sync.WaitGroup
	cfg.hooks.mount = func(mux *http.ServeMux) { mountDemo(mux, token, fleet.Load) }
	cfg.hooks.serving = func(dnsAddr, grpcAddr, httpAddr string) {
		f, err := demo.New(demo.Config{GRPCAddr: grpcAddr, HTTPAddr: httpAddr, DNSAddr: dnsAddr, Domain: cfg.Domain,
			Token: token, Dir: dir, Scenario: sc, RPS: c.RPS, Logger: log.With("component", "demo")})
		if err != nil {
			log.Error("demo fleet", "err", err)
			stopSrv()
			return
		}
		fleet.Store(f)
		fleetWG.Go(func() {
			if err := f.Run(fleetCtx); err != nil {
				log.Error("demo fleet stopped", "err", err)
			}
			stopSrv() // the fleet is gone (Ctrl-C or a failure): the server follows
		})
		fmt.Fprintf(stdout, "spillway demo: open http://%s/ui/ (admin token: %s)\n", httpAddr, token)
		fmt.Fprintf(stdout, "spillway demo: scenario %s: %s\n", sc.Name, sc.Description)
		fmt.Fprintf(stdout, "spillway demo: events: spillway demo event throttle-zone --zone zone-b --http-addr %s --token %s (also: %s)\n",
			httpAddr, token, strings.Join(demo.EventNames, ", "))
		if c.ready != nil {
			c.ready(demoInfo{DNSAddr: dnsAddr, GRPCAddr: grpcAddr, HTTPAddr: httpAddr, Token: token, Dir: dir, Fleet: f})
		}
	}
	err = run(srvCtx, cfg, log)
	stopFleet()    // run failed before the fleet stopped: stop it anyway
	fleetWG.Wait() // (the server is down by now if run failed, so agents' deregistrations fail fast)
	return err
}

// mountDemo adds the demo's events API:
//
//	GET  /v1/demo/events  -> the fleet's state (demo.State)
//	POST /v1/demo/events  {"event":"throttle-zone","zone":"zone-b"} with the admin token
func mountDemo(mux *http.ServeMux, token string, fleet func() *demo.Fleet) {
	mux.HandleFunc("GET /v1/demo/events", func(w http.ResponseWriter, r *http.Request) {
		f := fleet()
		if f == nil {
			httpjson.WriteError(w, http.StatusServiceUnavailable, "", "the demo fleet is starting")
			return
		}
		httpjson.Write(w, http.StatusOK, f.State())
	})
	mux.HandleFunc("POST /v1/demo/events", func(w http.ResponseWriter, r *http.Request) {
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			httpjson.WriteError(w, http.StatusUnauthorized, "authorization", "authorization: the demo's events need the admin token it printed (Authorization: Bearer TOKEN)")
			return
		}
		f := fleet()
		if f == nil {
			httpjson.WriteError(w, http.StatusServiceUnavailable, "", "the demo fleet is starting")
			return
		}
		var e demo.Event
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			httpjson.WriteError(w, http.StatusBadRequest, "body", fmt.Sprintf(`body: want {"event": NAME, "zone": ZONE}: %v`, err))
			return
		}
		if err := f.Event(r.Context(), e); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, demo.ErrBadEvent) {
				code = http.StatusBadRequest
			}
			httpjson.WriteError(w, code, "", err.Error())
			return
		}
		httpjson.Write(w, http.StatusOK, f.State())
	})
}

// demoEventMain runs `spillway demo event NAME [--zone Z] [--factor F]`.
func demoEventMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spillway demo event", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: spillway demo event NAME [flags]; NAME is one of %s\n", strings.Join(demo.EventNames, ", "))
		fs.PrintDefaults()
	}
	zone := fs.String("zone", "", "the zone of throttle-zone, restore-zone and cold-pod (cold-pod default zone-c)")
	factor := fs.Float64("factor", 0, "throttle-zone: the share of capacity left, in (0,1) (0: 0.1)")
	addr := fs.String("http-addr", "127.0.0.1:18080", "the demo's HTTP address")
	token := fs.String("token", os.Getenv("SPILLWAY_ADMIN_TOKEN"), "the admin token the demo printed (default $SPILLWAY_ADMIN_TOKEN)")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		return 2
	}
	name := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	body, _ := json.Marshal(demo.Event{Name: name, Zone: *zone, Factor: *factor})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+*addr+"/v1/demo/events", bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "spillway demo event: --http-addr: %v\n", err)
		return 2
	}
	req.Header.Set("Authorization", "Bearer "+*token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "spillway demo event: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "spillway demo event %s: %s: %s\n", name, resp.Status, bytes.TrimSpace(b))
		return 1
	}
	fmt.Fprintf(stdout, "spillway demo: %s applied\n", name)
	return 0
}
