package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway/spillway/cmd/spillway/internal/demo"
)

// lockedBuffer is a bytes.Buffer safe for the demo's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// demoWait bounds every wait of the demo test for one condition.
const demoWait = 20 * time.Second

// eventually polls cond every 200 ms until it is true or demoWait passes;
// it returns the last detail cond gave, for the failure message.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var detail string
	start := time.Now()
	for deadline := start.Add(demoWait); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var ok bool
		if ok, detail = cond(); ok {
			t.Logf("%s: after %v", what, time.Since(start).Round(100*time.Millisecond))
			return
		}
	}
	t.Fatalf("%s: not within %v; last: %s", what, demoWait, detail)
}

// demoWeights is the part of GET /v1/weights the test reads.
type demoWeights struct {
	Source string `json:"source"`
	Zones  []struct {
		Zone         string  `json:"zone"`
		Healthy      int     `json:"healthy"`
		SlowStarting int     `json:"slow_starting"`
		ErrorRatio   float64 `json:"error_ratio"`
		QueueFactor  float64 `json:"queue_factor"`
		ErrorFactor  float64 `json:"error_factor"`
		Demand       float64 `json:"demand"`
	} `json:"zones"`
	Routes []struct {
		ClientZone string `json:"client_zone"`
		Weights    []struct {
			Zone   string `json:"zone"`
			Weight uint32 `json:"weight"`
		} `json:"weights"`
	} `json:"routes"`
}

// TestDemo runs `spillway demo` on free loopback ports: the demo's
// services are listed, the main service gets weights planned from LRS
// load, each event has its effect, and cancelling stops everything: the
// temp dir is gone and the goroutines settle.
func TestDemo(t *testing.T) {
	// The first endpoints earn full trust within 2 ramps (time alone, with
	// load data); a pod added later is cold among warm ones.
	const ramp = 4 * time.Second
	before := runtime.NumGoroutine()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan demoInfo, 1)
	var stdout lockedBuffer
	errc := make(chan error, 1)
	done := make(chan struct{})
	t.Cleanup(func() { // also after a t.Fatal: the demo removes its temp dir before the test binary exits
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	go func() {
		defer close(done)
		errc <- runDemo(ctx, demoConfig{
			Scenario: "default", DNSAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
			RPS: 100, LRSInterval: time.Second, Weights: time.Second, SlowStartRamp: ramp, LogLevel: "error",
			ready: func(i demoInfo) { ready <- i },
		}, &stdout, io.Discard)
	}()
	var info demoInfo
	var readyAt time.Time
	select {
	case info = <-ready:
		readyAt = time.Now()
	case err := <-errc:
		t.Fatalf("runDemo returned before it was ready: %v", err)
	case <-time.After(demoWait):
		t.Fatalf("demo not ready within %v", demoWait)
	}
	base := "http://" + info.HTTPAddr
	if want := fmt.Sprintf("spillway demo: open %s/ui/ (admin token: %s)\n", base, info.Token); !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout = %q, want it to contain %q", stdout.String(), want)
	}
	get := func(path string, v any) int {
		t.Helper()
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK && v != nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("GET %s: %v: %s", path, err, b)
			}
		}
		return resp.StatusCode
	}
	event := func(token string, e demo.Event) (int, string) {
		t.Helper()
		body, _ := json.Marshal(e)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/demo/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("POST /v1/demo/events %+v: %v", e, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	weights := func() (demoWeights, int) {
		var w demoWeights
		code := get("/v1/weights?service="+demo.MainService, &w)
		return w, code
	}
	zoneOf := func(w demoWeights, zone string) (healthy, slow int, errRatio, capFactor float64) {
		for _, z := range w.Zones {
			if z.Zone == zone {
				return z.Healthy, z.SlowStarting, z.ErrorRatio, z.QueueFactor * z.ErrorFactor
			}
		}
		return 0, 0, 0, 0
	}

	// The demo's services, registered by its agents and the static file.
	eventually(t, "GET /v1/services lists the demo's services", func() (bool, string) {
		var s struct{ Services []struct{ Name string } }
		get("/v1/services", &s)
		var names []string
		for _, sv := range s.Services {
			names = append(names, sv.Name)
		}
		for _, want := range []string{demo.MainService, demo.PaymentsService, demo.InventoryService, demo.StaticService} {
			if !slices.Contains(names, want) {
				return false, fmt.Sprint(names)
			}
		}
		return true, ""
	})
	// Weights planned from the clients' LRS reports, in every zone.
	eventually(t, "GET /v1/weights has a plan from load reports", func() (bool, string) {
		w, code := weights()
		if code != http.StatusOK || w.Source != "lrs" || len(w.Zones) != 3 {
			return false, fmt.Sprintf("%d %+v", code, w)
		}
		for _, z := range w.Zones {
			if z.Demand <= 0 {
				return false, fmt.Sprintf("zone %s demand %v", z.Zone, z.Demand)
			}
		}
		return true, ""
	})
	// Who calls whom.
	eventually(t, "GET /v1/graph has the demo's edges", func() (bool, string) {
		var g struct {
			Edges []struct {
				ClientService string  `json:"client_service"`
				Service       string  `json:"service"`
				Rps           float64 `json:"rps"`
			} `json:"edges"`
		}
		get("/v1/graph", &g)
		var got []string
		for _, e := range g.Edges {
			if e.Rps > 0 {
				got = append(got, e.ClientService+"->"+e.Service)
			}
		}
		for _, want := range []string{"frontend->checkout", "checkout->payments", "checkout->inventory"} {
			if !slices.Contains(got, want) {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})

	// The events API: the token, the names.
	if code, body := event("wrong", demo.Event{Name: demo.EventPanicOn}); code != http.StatusUnauthorized {
		t.Errorf("POST /v1/demo/events with a wrong token = %d %s, want 401", code, body)
	}
	if code, body := event(info.Token, demo.Event{Name: "flood"}); code != http.StatusBadRequest || !strings.Contains(body, "event:") {
		t.Errorf("POST /v1/demo/events {flood} = %d %s, want 400 naming event", code, body)
	}
	if code, body := event(info.Token, demo.Event{Name: demo.EventThrottleZone, Zone: "zone-x"}); code != http.StatusBadRequest || !strings.Contains(body, "zone:") {
		t.Errorf("POST /v1/demo/events {throttle-zone zone-x} = %d %s, want 400 naming zone", code, body)
	}

	// throttle-zone: zone-b's backends refuse and queue; the clients'
	// reports show errors and the capacity model discounts zone-b.
	if code, body := event(info.Token, demo.Event{Name: demo.EventThrottleZone, Zone: "zone-b"}); code != http.StatusOK {
		t.Fatalf("throttle-zone zone-b = %d %s", code, body)
	}
	eventually(t, "zone-b discounted after throttle-zone", func() (bool, string) {
		w, _ := weights()
		_, _, er, f := zoneOf(w, "zone-b")
		if er > 0 && f < 1 {
			t.Logf("zone-b throttled: error_ratio %.3f, queue*error factor %.3f", er, f)
		}
		return er > 0 && f < 1, fmt.Sprintf("zone-b error_ratio %v, queue*error factor %v", er, f)
	})
	// restore-zone, through the CLI.
	var cliOut, cliErr bytes.Buffer
	if code := demoEventMain(ctx, []string{"restore-zone", "--zone", "zone-b", "--http-addr", info.HTTPAddr, "--token", info.Token}, &cliOut, &cliErr); code != 0 {
		t.Errorf("spillway demo event restore-zone = exit %d: %s", code, cliErr.String())
	}
	for _, b := range info.Fleet.State().Backends {
		if b.Throttled {
			t.Errorf("backend %s still throttled after restore-zone", b.ID)
		}
	}

	// cold-pod: a new endpoint in zone-c, counted as slow-starting once
	// the first ones are warm (before, the whole fleet is cold and a new
	// pod is not discounted: zoneaware's relief).
	time.Sleep(time.Until(readyAt.Add(2*ramp + 2*time.Second)))
	w, _ := weights()
	healthyC, _, _, _ := zoneOf(w, "zone-c")
	if code, body := event(info.Token, demo.Event{Name: demo.EventColdPod, Zone: "zone-c"}); code != http.StatusOK {
		t.Fatalf("cold-pod zone-c = %d %s", code, body)
	}
	eventually(t, "a slow-starting endpoint in zone-c after cold-pod", func() (bool, string) {
		w, _ := weights()
		h, slow, _, _ := zoneOf(w, "zone-c")
		return h == healthyC+1 && slow >= 1, fmt.Sprintf("zone-c healthy %d (was %d), slow_starting %d", h, healthyC, slow)
	})

	// panic-on: the flag, and the clients move to DNS; panic-off back.
	for _, on := range []bool{true, false} {
		name, want, channel := demo.EventPanicOn, "off", "dns"
		if !on {
			name, want, channel = demo.EventPanicOff, "on", "xds"
		}
		if code, body := event(info.Token, demo.Event{Name: name}); code != http.StatusOK {
			t.Fatalf("%s = %d %s", name, code, body)
		}
		var p struct {
			Panic bool   `json:"panic"`
			XDS   string `json:"xds"`
		}
		get("/v1/panic", &p)
		if p.Panic != on || p.XDS != want {
			t.Errorf("GET /v1/panic after %s = %+v, want panic %v, xds %s", name, p, on, want)
		}
		eventually(t, "every client on "+channel+" after "+name, func() (bool, string) {
			var s demo.State
			get("/v1/demo/events", &s)
			for _, c := range s.Clients {
				if c.Channel != channel {
					return false, fmt.Sprintf("%s->%s in %s on %s", c.From, c.To, c.Zone, c.Channel)
				}
			}
			return len(s.Clients) > 0, "no clients"
		})
	}

	// Ctrl-C: everything stops, nothing is left behind.
	hc.CloseIdleConnections()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("runDemo after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runDemo did not return within 30s of cancel")
	}
	if _, err := os.Stat(info.Dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s after the demo: stat err %v, want it gone", info.Dir, err)
	}
	var after int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before {
			break
		}
	}
	if after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d after the demo stopped, %d before:\n%s", after, before, buf[:runtime.Stack(buf, true)])
	}
}
