package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/clientlib/heartbeat"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// The demo's services: clients of frontend call checkout (the main
// service, whose zones differ), checkout calls payments and inventory (a
// VM agent's endpoint); ledger comes from the static file.
const (
	MainService      = "checkout"
	CallerService    = "frontend"
	PaymentsService  = "payments"
	InventoryService = "inventory"
	StaticService    = "ledger"
)

// Event names accepted by Fleet.Event.
const (
	EventThrottleZone = "throttle-zone" // Zone; Factor (0,1], default 0.1
	EventRestoreZone  = "restore-zone"  // Zone
	EventColdPod      = "cold-pod"      // Zone, default zone-c
	EventPanicOn      = "panic-on"
	EventPanicOff     = "panic-off"
)

// EventNames lists every event.
var EventNames = []string{EventThrottleZone, EventRestoreZone, EventColdPod, EventPanicOn, EventPanicOff}

// Event is one change to the running demo.
type Event struct {
	Name   string  `json:"event"`
	Zone   string  `json:"zone,omitempty"`
	Factor float64 `json:"factor,omitempty"`
}

// ErrBadEvent wraps an event that names no known event or zone.
var ErrBadEvent = errors.New("bad event")

// Config configures a Fleet.
type Config struct {
	// GRPCAddr, HTTPAddr and DNSAddr are the server's addresses; required.
	GRPCAddr, HTTPAddr, DNSAddr string
	// Domain is the server's DNS domain; required.
	Domain string
	// Token is the admin token, for panic-on and panic-off; required.
	Token string
	// Dir is a directory the fleet may write (the clients' rollout file);
	// required.
	Dir string
	// Scenario shapes the fleet (LookupScenario).
	Scenario Scenario
	// RPS is the main service's total demand in requests per second
	// (default 100); payments gets a quarter of it, inventory a tenth.
	RPS float64
	// PollInterval is how often the clients read the panic flag (default 2s).
	PollInterval time.Duration
	// Logger receives the fleet's logs; nil discards them.
	Logger *slog.Logger
}

// Fleet is the demo's synthetic part: backends, their VM agents and the
// grpc-go xDS clients sending rate-limited load.
type Fleet struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client

	wg    sync.WaitGroup // clients, agents, timeline
	srvWG sync.WaitGroup // backends' Serve, stopped after wg is done

	// mu guards the fields below it.
	mu       sync.Mutex
	regConn  *grpc.ClientConn // set by Run
	ctx      context.Context  // Run's, nil before it and after it stopped
	backends []*backend
	clients  []*client
	cold     int
	history  []string // the last events, newest last
}

// New validates cfg and returns a Fleet; Run starts it.
func New(cfg Config) (*Fleet, error) {
	for _, f := range []struct{ name, v string }{{"GRPCAddr", cfg.GRPCAddr}, {"HTTPAddr", cfg.HTTPAddr}, {"DNSAddr", cfg.DNSAddr}, {"Domain", cfg.Domain}, {"Token", cfg.Token}, {"Dir", cfg.Dir}} {
		if f.v == "" {
			return nil, fmt.Errorf("demo config: %s: required", f.name)
		}
	}
	if cfg.Scenario.Name == "" {
		s, _ := LookupScenario("")
		cfg.Scenario = s
	}
	if cfg.RPS == 0 {
		cfg.RPS = 100
	}
	if cfg.RPS < 0 || cfg.RPS > 1000 {
		return nil, fmt.Errorf("demo config: RPS: %v, want 0..1000", cfg.RPS)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fleet{cfg: cfg, log: log, http: &http.Client{Timeout: 5 * time.Second}}, nil
}

// Run starts the backends, registers them through VM agents, dials the
// clients and sends load until ctx ends; then it stops every client,
// deregisters every backend (the server must still be up) and returns
// once every goroutine it started has.
func (f *Fleet) Run(ctx context.Context) error {
	conn, err := grpc.NewClient(f.cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("demo: dial registry: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	f.mu.Lock()
	f.regConn, f.ctx = conn, ctx
	f.mu.Unlock()
	defer func() {
		cancel()
		f.mu.Lock()
		f.ctx = nil // no backend is added from here on
		f.mu.Unlock()
		f.wg.Wait() // clients closed, agents deregistered
		f.mu.Lock()
		for _, b := range f.backends {
			b.stop()
		}
		f.mu.Unlock()
		f.srvWG.Wait()
	}()
	rollout := filepath.Join(f.cfg.Dir, "rollout.yaml")
	if err := os.WriteFile(rollout, []byte("rules:\n  - name: demo-everyone\n    match: {}\n    percent: 100\n"), 0o600); err != nil {
		return fmt.Errorf("demo: rollout file: %w", err)
	}

	sc := f.cfg.Scenario
	for _, z := range Zones {
		for i := range sc.Backends[z] {
			if err := f.addBackend(MainService, z, fmt.Sprintf("%s-%s-%d", MainService, z, i+1), sc.Limit[z]); err != nil {
				return err
			}
		}
		if err := f.addBackend(PaymentsService, z, fmt.Sprintf("%s-%s-1", PaymentsService, z), 3); err != nil {
			return err
		}
	}
	// The VM agent: one inventory endpoint in zone-a.
	if err := f.addBackend(InventoryService, "zone-a", "inventory-vm-1", 4); err != nil {
		return err
	}

	total := 0.0
	for _, z := range Zones {
		total += sc.Demand[z]
	}
	for _, z := range Zones {
		share := sc.Demand[z] / max(total, 1)
		for _, c := range []struct {
			from, to string
			rps      float64
		}{
			{CallerService, MainService, f.cfg.RPS * share},
			{MainService, PaymentsService, f.cfg.RPS / 4 / 3},
			{MainService, InventoryService, f.cfg.RPS / 10 / 3},
		} {
			if err := f.addClient(ctx, c.from, c.to, z, c.rps, rollout); err != nil {
				return err
			}
		}
	}
	for _, t := range sc.Timeline {
		f.wg.Go(func() {
			tm := time.NewTimer(t.After)
			defer tm.Stop()
			select {
			case <-ctx.Done():
			case <-tm.C:
				if err := f.Event(ctx, t.Event); err != nil {
					f.log.Warn("scenario event failed", "event", t.Event.Name, "err", err)
				}
			}
		})
	}
	f.log.Info("demo fleet running", "scenario", sc.Name, "rps", f.cfg.RPS)
	<-ctx.Done()
	return nil
}

// addBackend starts a backend and its VM agent; the agent registers it and
// deregisters it when the fleet stops.
func (f *Fleet) addBackend(service, zone, id string, limit int) error {
	b, err := newBackend(service, zone, id, limit, serviceTime)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx := f.ctx
	if ctx == nil {
		b.stop()
		return fmt.Errorf("demo: backend %s: the fleet is not running", id)
	}
	a, err := heartbeat.New(heartbeat.Config{
		Conn:    f.regConn,
		Service: service,
		Endpoint: &registryv1.Endpoint{
			Id:       id,
			Address:  "127.0.0.1",
			Ports:    []*registryv1.Port{{Name: "grpc", Number: uint32(b.port)}},
			Locality: &registryv1.Locality{Region: Region, Zone: zone},
			Metadata: map[string]string{"demo": "true"},
		},
		TTL:    10 * time.Second,
		Logger: f.log.With("agent", id),
	})
	if err != nil {
		b.stop()
		return fmt.Errorf("demo: agent %s: %w", id, err)
	}
	f.backends = append(f.backends, b)
	f.srvWG.Go(b.serve)
	f.wg.Go(func() {
		if err := a.Run(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("agent stopped", "id", id, "err", err)
		}
	})
	return nil
}

// client is one grpc-go client (clientlib Conn, xDS with its own
// bootstrap) of one calling service in one zone, sending rps.
type client struct {
	from, to, zone string
	rps            float64
	conn           *clientlib.Conn
	ok, failed     atomic.Uint64
}

func (f *Fleet) addClient(ctx context.Context, from, to, zone string, rps float64, rollout string) error {
	conn, err := clientlib.Dial(ctx, to,
		clientlib.WithService(from),
		clientlib.WithZone(zone), clientlib.WithRegion(Region),
		clientlib.WithControlPlane(f.cfg.GRPCAddr),
		clientlib.WithDNSServer(f.cfg.DNSAddr),
		clientlib.WithDomain(f.cfg.Domain),
		clientlib.WithRolloutFile(rollout),
		clientlib.WithPanicPollInterval(f.cfg.PollInterval),
		clientlib.WithPerConnBootstrap(),
		clientlib.WithLogger(f.log.With("client", from+"->"+to, "zone", zone)),
	)
	if err != nil {
		return fmt.Errorf("demo: client %s -> %s in %s: %w", from, to, zone, err)
	}
	c := &client{from: from, to: to, zone: zone, rps: rps, conn: conn}
	f.mu.Lock()
	f.clients = append(f.clients, c)
	f.mu.Unlock()
	f.wg.Go(func() {
		defer conn.Close()
		c.loop(ctx)
	})
	return nil
}

// maxInFlight bounds a client's outstanding RPCs; a tick finding it full
// is skipped, so a slow zone never piles up goroutines.
const maxInFlight = 32

// loop sends rps Check RPCs per second until ctx ends.
func (c *client) loop(ctx context.Context) {
	if c.rps <= 0 {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / c.rps))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInFlight)
	hc := healthpb.NewHealthClient(c.conn)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			c.failed.Add(1)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if _, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}); err != nil {
				c.failed.Add(1)
				return
			}
			c.ok.Add(1)
		})
	}
}

// Event applies e to the running fleet.
func (f *Fleet) Event(ctx context.Context, e Event) error {
	if e.Zone != "" && !slices.Contains(Zones, e.Zone) {
		return fmt.Errorf("%w: zone: %q is not one of %v", ErrBadEvent, e.Zone, Zones)
	}
	switch e.Name {
	case EventThrottleZone, EventRestoreZone:
		if e.Zone == "" {
			return fmt.Errorf("%w: zone: required for %s", ErrBadEvent, e.Name)
		}
		factor := 1.0
		if e.Name == EventThrottleZone {
			factor = e.Factor
			if factor == 0 {
				factor = 0.1
			}
			if factor < 0 || factor >= 1 {
				return fmt.Errorf("%w: factor: %v, want (0, 1)", ErrBadEvent, e.Factor)
			}
		}
		f.mu.Lock()
		for _, b := range f.backends {
			if b.service == MainService && b.zone == e.Zone {
				b.throttle(factor)
			}
		}
		f.mu.Unlock()
	case EventColdPod:
		if e.Zone == "" {
			e.Zone = "zone-c"
		}
		f.mu.Lock()
		f.cold++
		id := fmt.Sprintf("%s-%s-cold-%d", MainService, e.Zone, f.cold)
		f.mu.Unlock()
		if err := f.addBackend(MainService, e.Zone, id, f.cfg.Scenario.Limit[e.Zone]); err != nil {
			return err
		}
	case EventPanicOn, EventPanicOff:
		if err := f.setPanic(ctx, e.Name == EventPanicOn); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: event: %q is not one of %v", ErrBadEvent, e.Name, EventNames)
	}
	f.log.Info("demo event", "event", e.Name, "zone", e.Zone)
	f.mu.Lock()
	f.history = append(f.history, fmt.Sprintf("%s %s %s", time.Now().UTC().Format(time.RFC3339), e.Name, e.Zone))
	if len(f.history) > 20 {
		f.history = f.history[len(f.history)-20:]
	}
	f.mu.Unlock()
	return nil
}

// setPanic changes the panic flag through the server's own API, as
// spillwayctl panic does.
func (f *Fleet) setPanic(ctx context.Context, on bool) error {
	body, _ := json.Marshal(map[string]bool{"panic": on})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.cfg.HTTPAddr+"/v1/panic", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.http.Do(req)
	if err != nil {
		return fmt.Errorf("demo: POST /v1/panic: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("demo: POST /v1/panic: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// State is what GET /v1/demo/events shows of the fleet.
type State struct {
	Scenario    string        `json:"scenario"`
	Description string        `json:"description"`
	Events      []string      `json:"events"`
	Backends    []BackendInfo `json:"backends"`
	Clients     []ClientInfo  `json:"clients"`
	History     []string      `json:"history"`
}

// BackendInfo is one backend in State.
type BackendInfo struct {
	Service   string `json:"service"`
	Zone      string `json:"zone"`
	ID        string `json:"id"`
	Port      int    `json:"port"`
	Limit     int64  `json:"limit"`
	DelayMS   int64  `json:"service_time_ms"`
	Throttled bool   `json:"throttled"`
	InFlight  int64  `json:"in_flight"`
	Served    uint64 `json:"served"`
	Rejected  uint64 `json:"rejected"`
}

// ClientInfo is one client in State.
type ClientInfo struct {
	From    string  `json:"from"`
	To      string  `json:"to"`
	Zone    string  `json:"zone"`
	RPS     float64 `json:"rps"`
	Channel string  `json:"channel"`
	OK      uint64  `json:"ok"`
	Failed  uint64  `json:"failed"`
}

// State returns the fleet's current state.
func (f *Fleet) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := State{Scenario: f.cfg.Scenario.Name, Description: f.cfg.Scenario.Description, Events: EventNames, History: slices.Clone(f.history)}
	if s.History == nil {
		s.History = []string{}
	}
	for _, b := range f.backends {
		s.Backends = append(s.Backends, BackendInfo{Service: b.service, Zone: b.zone, ID: b.id, Port: b.port,
			Limit: b.limit.Load(), DelayMS: time.Duration(b.delay.Load()).Milliseconds(), Throttled: b.throttled(),
			InFlight: b.inflight.Load(), Served: b.served.Load(), Rejected: b.rejected.Load()})
	}
	for _, c := range f.clients {
		s.Clients = append(s.Clients, ClientInfo{From: c.from, To: c.to, Zone: c.zone, RPS: c.rps,
			Channel: fmt.Sprint(c.conn.Status().Channel), OK: c.ok.Load(), Failed: c.failed.Load()})
	}
	return s
}

// StaticFile is the demo's --static-file: the ledger service, two
// endpoints per zone that nothing serves (a service known only to DNS).
func StaticFile() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "services:\n  - name: %s\n    endpoints:\n", StaticService)
	for i, z := range Zones {
		for j := range 2 {
			fmt.Fprintf(&b, "      - id: ledger-%s-%d\n        address: 127.0.0.%d\n        ports: [\"grpc=%d\"]\n        zone: %s\n        region: %s\n",
				z, j+1, 10+i, 9000+j, z, Region)
		}
	}
	return b.Bytes()
}
