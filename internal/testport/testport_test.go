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

// TestShard: TESTPORT_SHARD values parse or are refused, and the parts of
// a range are disjoint and cover it but for the remainder.
func TestShard(t *testing.T) {
	for _, c := range []struct {
		v    string
		i, n int
		ok   bool
	}{
		{"0/2", 0, 2, true},
		{"1/2", 1, 2, true},
		{"0/1", 0, 1, true},
		{"2/2", 0, 0, false},
		{"-1/2", 0, 0, false},
		{"1/0", 0, 0, false},
		{"1/65", 0, 0, false},
		{"1", 0, 0, false},
		{"a/b", 0, 0, false},
		{"", 0, 0, false},
	} {
		i, n, ok := Shard(c.v)
		if ok != c.ok || ok && (i != c.i || n != c.n) {
			t.Errorf("Shard(%q) = %d, %d, %v; want %d, %d, %v", c.v, i, n, ok, c.i, c.n, c.ok)
		}
	}
	prevHi := 20000
	for i := range 3 {
		lo, hi := Part(20000, 32768, i, 3)
		if lo != prevHi || hi <= lo {
			t.Errorf("Part(20000, 32768, %d, 3) = [%d, %d), want it to start at %d", i, lo, hi, prevHi)
		}
		prevHi = hi
	}
	if prevHi > 32768 || 32768-prevHi >= 3 {
		t.Errorf("the parts end at %d: want within 3 of 32768", prevHi)
	}
}
