package xds

import (
	"testing"

	"github.com/spillway/spillway/weights/svcconfig"
)

// TestRingSizes: a ring hash service of n endpoints is sent a ring of
// exactly P entries an endpoint (min = max = P·n, P = max_ring_size over
// the power of two at or above n), between max/2 and max; so grpc-go's
// ceil(min_ring_size/n) entries an endpoint stays P when an endpoint
// comes or goes within a power of two, and the endpoints that stay keep
// their places on the ring. Unknown n sends the configured sizes.
func TestRingSizes(t *testing.T) {
	rh := &svcconfig.RingHash{Header: "x-user", MinRingSize: 1024, MaxRingSize: 4096}
	if lo, hi := ringSizes(rh, 0); lo != 1024 || hi != 4096 {
		t.Errorf("ringSizes(n=0) = %d, %d; want the configured 1024, 4096", lo, hi)
	}
	entries := func(n int) uint64 { // grpc-go's, for n equal endpoints
		lo, _ := ringSizes(rh, n)
		return (lo + uint64(n) - 1) / uint64(n)
	}
	for n := 1; n <= 5000; n++ {
		lo, hi := ringSizes(rh, n)
		switch {
		case lo != hi:
			t.Fatalf("n=%d: min %d, max %d, want them equal", n, lo, hi)
		case lo%uint64(n) != 0:
			t.Fatalf("n=%d: ring %d is not a whole number of entries an endpoint", n, lo)
		case n <= 4096 && (lo > 4096 || 2*lo <= 4096):
			t.Fatalf("n=%d: ring %d, want in (2048, 4096]", n, lo)
		}
		// n and n−1 in one band (2^(k−1), 2^k]: an endpoint leaving
		// changes no other's entries.
		if m := n - 1; m > 1 && m&(m-1) != 0 && entries(n) != entries(m) {
			t.Fatalf("n=%d -> %d: %d -> %d entries an endpoint, want the same", n, n-1, entries(n), entries(n-1))
		}
	}
	if e := entries(6); e != 512 {
		t.Errorf("n=6: %d entries an endpoint, want 4096/8 = 512", e)
	}
}
