// Package benchdata is the data set of the xDS fan-out benchmark
// (e2e/bench/xdsbench): the services and endpoints both servers hold, and the
// endpoint changes the driver makes. The driver and the baseline server build
// it from the same three numbers, so both serve exactly the same endpoints.
//
// Service i is named svc-NNN (svc-000, svc-001, …). Its endpoint j is
// ep-j at 10.(1+i/250).(i%250).(j+1):8080 (port name "grpc") in zone
// Zones(z)[j%z] of region Region.
package benchdata

import (
	"fmt"
	"net/netip"
)

const (
	// Region is every endpoint's and every client's region.
	Region = "region-1"
	// Port is every endpoint's port, named PortName.
	Port     = 8080
	PortName = "grpc"

	// MaxServices, MaxEndpoints and MaxZones bound the data set so that
	// every address above is a valid, distinct IPv4 address.
	MaxServices  = 250 * 50
	MaxEndpoints = 250
	MaxZones     = 26
)

// Endpoint is one endpoint of a service.
type Endpoint struct {
	ID      string // a DNS label, unique within its service
	Address netip.Addr
	Zone    string
}

// Service is a named list of endpoints.
type Service struct {
	Name      string
	Endpoints []Endpoint
}

// Change adds or removes one endpoint of one service.
type Change struct {
	Seq     int  // 0, 1, … in the order the driver makes them
	Service int  // index into the services
	Add     bool // add Endpoint (true) or remove it (false)
	// Endpoint is the endpoint added, or the one removed.
	Endpoint Endpoint
}

// Zones returns n zone names: zone-a, zone-b, ….
func Zones(n int) []string {
	z := make([]string, n)
	for i := range z {
		z[i] = "zone-" + string(rune('a'+i))
	}
	return z
}

// ServiceName is the name of service i.
func ServiceName(i int) string { return fmt.Sprintf("svc-%03d", i) }

// Validate reports a bad size, naming the flag the driver and the baseline
// both use for it.
func Validate(services, endpoints, zones int) error {
	switch {
	case services < 1 || services > MaxServices:
		return fmt.Errorf("--services: %d, want 1..%d", services, MaxServices)
	case endpoints < 1 || endpoints > MaxEndpoints:
		return fmt.Errorf("--endpoints: %d, want 1..%d", endpoints, MaxEndpoints)
	case zones < 1 || zones > MaxZones:
		return fmt.Errorf("--zones: %d, want 1..%d", zones, MaxZones)
	}
	return nil
}

// Services builds the data set: services services of endpoints endpoints
// each, spread round-robin over zones zones. The sizes must pass Validate.
func Services(services, endpoints, zones int) []Service {
	zs := Zones(zones)
	out := make([]Service, services)
	for i := range out {
		eps := make([]Endpoint, endpoints)
		for j := range eps {
			eps[j] = Endpoint{
				ID:      fmt.Sprintf("ep-%d", j),
				Address: netip.AddrFrom4([4]byte{10, byte(1 + i/250), byte(i % 250), byte(j + 1)}),
				Zone:    zs[j%zones],
			}
		}
		out[i] = Service{Name: ServiceName(i), Endpoints: eps}
	}
	return out
}

// Plan returns m changes, each on a different service: even ones add a new
// endpoint (add-<seq> at 10.200.x.y, zones round-robin), odd ones remove
// one of the service's original endpoints. m must not exceed the number of
// services; services is what Services returned.
func Plan(services []Service, zones, m int) ([]Change, error) {
	n := len(services)
	if m < 1 || m > n {
		return nil, fmt.Errorf("--changes: %d, want 1..%d (one service per change)", m, n)
	}
	zs := Zones(zones)
	// A stride coprime with n visits m distinct services spread over the range.
	stride := 37
	for gcd(stride, n) != 1 {
		stride++
	}
	out := make([]Change, m)
	for seq := range out {
		svc := (5 + seq*stride) % n
		c := Change{Seq: seq, Service: svc}
		if seq%2 == 0 {
			c.Add = true
			c.Endpoint = Endpoint{
				ID:      fmt.Sprintf("add-%d", seq),
				Address: netip.AddrFrom4([4]byte{10, 200, byte(seq / 250), byte(seq%250 + 1)}),
				Zone:    zs[seq%zones],
			}
		} else {
			eps := services[svc].Endpoints
			c.Endpoint = eps[(seq/2)%len(eps)]
		}
		out[seq] = c
	}
	return out, nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
