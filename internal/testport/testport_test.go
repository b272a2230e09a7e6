package testport

import (
	"net"
	"strconv"
	"testing"
)

func TestRange(t *testing.T) {
	for _, c := range []struct{ low, lo, hi int }{
		{32768, 20000, 32768},
		{49152, 20000, 49152},
		{20500, 10000, 20500},
		{5000, 10000, 11000},
	} {
		if lo, hi := Range(c.low); lo != c.lo || hi != c.hi {
			t.Errorf("Range(%d) = [%d, %d), want [%d, %d)", c.low, lo, hi, c.lo, c.hi)
		}
	}
}

// TestPort: the ports handed out are distinct, below the ephemeral range,
// and bindable for TCP and UDP; a port in use is skipped.
func TestPort(t *testing.T) {
	lo, hi := Range(ephemeralLow())
	seen := map[int]bool{}
	for range 50 {
		p := Port(t)
		if p < lo || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	// Hold the next candidate: Port must pass over it.
	ports.Lock()
	next := ports.next
	ports.Unlock()
	// A failed Listen means another process holds it: Port must pass over
	// it all the same.
	if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(next))); err == nil {
		defer l.Close()
	}
	if p := Port(t); p == next {
		t.Errorf("Port() = %d, the port held by this test", p)
	}
	addr := Addr(t)
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("UDP on %s from Addr: %v", addr, err)
	}
	u.Close()
}
