package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/spillway/spillway/internal/regionshape"
	"github.com/spillway/spillway/registry"
)

// The target region of issue 31, at 100 %: a replica's share of a mesh of
// two million nodes.
const (
	fullEndpoints  = 1_000_000
	fullServices   = 50_000
	fullStreams    = 50_000 // xDS streams one replica holds
	fullChurn      = 1_000  // registrations per second, region-wide
	regionZones    = 3
	heartbeatEvery = 10 * time.Second
)

// region is the target region at one fraction of its size. Endpoints,
// services, streams and churn scale with the fraction; zones and the
// heartbeat interval do not.
type region struct {
	Fraction  float64
	Endpoints int
	Services  int
	Streams   int
	Churn     int // registrations per second
	Zones     int
	Heartbeat time.Duration
}

func newRegion(fraction float64) region {
	scale := func(n int) int {
		v := int(float64(n)*fraction + 0.5)
		if v < 1 {
			v = 1
		}
		return v
	}
	return region{
		Fraction:  fraction,
		Endpoints: scale(fullEndpoints),
		Services:  scale(fullServices),
		Streams:   scale(fullStreams),
		Churn:     scale(fullChurn),
		Zones:     regionZones,
		Heartbeat: heartbeatEvery,
	}
}

// Label is how tables name the size: "10 %", "100 %".
func (r region) Label() string { return fmt.Sprintf("%g %%", r.Fraction*100) }

// ServiceName is the name of service i.
func ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// Sizes returns the endpoint count of every service, summing to
// r.Endpoints, skewed as real fleets are (regionshape.Sizes: one service
// of 10,000 endpoints at 100 %, one in 1,000 of 1,000, one in 100 of 200).
func (r region) Sizes() []int { return regionshape.Sizes(r.Endpoints, r.Services) }

// Endpoint is endpoint j of the region (numbered across all services):
// its address (10.0.0.0/8, never dialled), port and zone, and the id
// Register gives an endpoint registered without one ("10-0-0-1-8080").
type Endpoint struct {
	Service string
	ID      string
	Addr    netip.Addr
	Port    uint32
	Zone    string
}

// Walk calls fn for every endpoint of the region, service by
// service; fn returning false stops the walk.
func (r region) Walk(fn func(Endpoint) bool) {
	n := 0
	for i, size := range r.Sizes() {
		svc := ServiceName(i)
		for j := 0; j < size; j++ {
			a := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
			ep := Endpoint{
				Service: svc,
				ID:      registry.DefaultEndpointID(a, 8080),
				Addr:    a,
				Port:    8080,
				Zone:    ZoneName(j % r.Zones),
			}
			if !fn(ep) {
				return
			}
			n++
		}
	}
}

// ZoneName is the name of zone z.
func ZoneName(z int) string { return fmt.Sprintf("zone-%c", 'a'+z) }
