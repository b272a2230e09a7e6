package benchdata

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// MaxChurn is the most changes ChurnPlan gives: the addresses it adds
// are 10.251.0.1 to 10.253.255.254, host bytes 1 to 254, none in a data
// set the driver loads.
const MaxChurn = 3 * 256 * 254

// ChurnPlan returns n changes for a churn window (xdsbench --churn), each
// the registration of a new endpoint (churn-<j> at its own address in
// 10.251.0.0/16–10.253.0.0/16, zones round-robin) on the service of a
// stream drawn at random: a service is so drawn in proportion to its
// streams, hence to its endpoints, as churn is, and a large service is
// drawn many times. Seqs run from first. streamSvc is what Spread gave
// (nil: stream i has service i%len(services), as the generated data set
// spreads them; k streams). The draw is the same for every run of the
// same arguments, so every target gets the same changes.
//
// The window adds and removes nothing else: the last change on a service
// is then an addition, and a stream whose assignment holds that
// endpoint holds every change made to its service before it, which is
// how the driver checks that every stream ended where the changes left
// its service.
func ChurnPlan(services []Service, zones []string, streamSvc []int, k, n, first int) ([]Change, error) {
	switch {
	case n < 1 || n > MaxChurn:
		return nil, fmt.Errorf("churn: %d changes, want 1 to %d", n, MaxChurn)
	case k < 1 || len(services) == 0 || len(zones) == 0:
		return nil, fmt.Errorf("churn: %d streams over %d services and %d zones, want at least one of each", k, len(services), len(zones))
	case streamSvc != nil && len(streamSvc) != k:
		return nil, fmt.Errorf("churn: %d stream services for %d streams", len(streamSvc), k)
	}
	rng := rand.New(rand.NewPCG(31, uint64(n)))
	out := make([]Change, n)
	for j := range out {
		i := rng.IntN(k)
		svc := i % len(services)
		if streamSvc != nil {
			svc = streamSvc[i]
		}
		v := 251<<16 + j/254<<8 + j%254 + 1
		out[j] = Change{Seq: first + j, Service: svc, Add: true, Endpoint: Endpoint{
			ID:      fmt.Sprintf("churn-%d", j),
			Address: netip.AddrFrom4([4]byte{10, byte(v >> 16), byte(v >> 8), byte(v)}),
			Zone:    zones[j%len(zones)],
		}}
	}
	return out, nil
}
