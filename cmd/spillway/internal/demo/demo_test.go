package demo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/static"
)

func TestLookupScenario(t *testing.T) {
	for _, tc := range []struct {
		name, want, err string
	}{
		{"", "default", ""},
		{"default", "default", ""},
		{"degraded-zone", "degraded-zone", ""},
		{"cold-pod", "cold-pod", ""},
		{"heavy-zone", "heterogeneous-clients", ""},
		{"worked-example", "worked-example", ""},
		{"zone-outage", "", `scenario: "zone-outage" is not one of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := LookupScenario(tc.name)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("LookupScenario(%q) err = %v, want %q", tc.name, err, tc.err)
				}
				return
			}
			if err != nil || s.Name != tc.want {
				t.Fatalf("LookupScenario(%q) = %q, %v, want %q", tc.name, s.Name, err, tc.want)
			}
			for _, z := range Zones {
				if s.Demand[z] <= 0 || s.Backends[z] < 1 || s.Limit[z] < 1 {
					t.Errorf("scenario %s zone %s: demand %v, backends %d, limit %d, want all positive", s.Name, z, s.Demand[z], s.Backends[z], s.Limit[z])
				}
			}
		})
	}
}

// TestEventInvalid: a bad event is refused with ErrBadEvent naming the
// field, before anything changes.
func TestEventInvalid(t *testing.T) {
	f, err := New(Config{GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:1", DNSAddr: "127.0.0.1:1", Domain: "spillway.internal.", Token: "t", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		e     Event
		field string
	}{
		{"unknown", Event{Name: "flood"}, "event:"},
		{"bad_zone", Event{Name: EventColdPod, Zone: "zone-x"}, "zone:"},
		{"throttle_no_zone", Event{Name: EventThrottleZone}, "zone:"},
		{"throttle_factor", Event{Name: EventThrottleZone, Zone: "zone-a", Factor: 1.5}, "factor:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.Event(context.Background(), tc.e)
			if !errors.Is(err, ErrBadEvent) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Event(%+v) = %v, want ErrBadEvent naming %s", tc.e, err, tc.field)
			}
		})
	}
	if err := f.Event(context.Background(), Event{Name: EventColdPod}); err == nil {
		t.Error("cold-pod before Run = nil, want an error: the fleet is not running")
	}
}

func TestNewInvalid(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "GRPCAddr") {
		t.Errorf("New(Config{}) = %v, want an error naming GRPCAddr", err)
	}
	if _, err := New(Config{GRPCAddr: "a", HTTPAddr: "b", DNSAddr: "c", Domain: "d", Token: "t", Dir: "x", RPS: 5000}); err == nil || !strings.Contains(err.Error(), "RPS") {
		t.Errorf("New(RPS 5000) = %v, want an error naming RPS", err)
	}
}

// TestStaticFile: the demo's static file loads into a store.
func TestStaticFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "static.yaml")
	if err := os.WriteFile(path, StaticFile(), 0o600); err != nil {
		t.Fatal(err)
	}
	store := registry.NewStore()
	src, err := static.New(static.Config{Path: path, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Load(); err != nil {
		t.Fatalf("Load: %v\n%s", err, StaticFile())
	}
	if got, want := store.Snapshot().EndpointCount(), 2*len(Zones); got != want {
		t.Errorf("endpoints = %d, want %d", got, want)
	}
}

// TestBackendThrottle: a throttled backend refuses beyond its smaller
// limit and serves slower; factor 1 restores it.
func TestBackendThrottle(t *testing.T) {
	b, err := newBackend("s", "zone-a", "b1", 4, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer b.lis.Close()
	b.throttle(0.25)
	if got, want := b.limit.Load(), int64(1); got != want {
		t.Errorf("limit after throttle(0.25) = %d, want %d", got, want)
	}
	if got, want := time.Duration(b.delay.Load()), 40*time.Millisecond; got != want {
		t.Errorf("service time after throttle(0.25) = %v, want %v", got, want)
	}
	if !b.throttled() {
		t.Error("throttled() = false after throttle(0.25)")
	}
	b.throttle(1)
	if b.throttled() || b.limit.Load() != 4 || time.Duration(b.delay.Load()) != 10*time.Millisecond {
		t.Errorf("after throttle(1): limit %d, delay %v, want 4, 10ms", b.limit.Load(), time.Duration(b.delay.Load()))
	}
}
