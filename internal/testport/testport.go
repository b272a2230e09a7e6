// Package testport hands out loopback ports for servers that tests start
// as separate processes (spillway, etcd), which must be told their port
// before they bind it. A port is checked free for TCP and UDP and then
// closed, so another process could take it before the server binds; to
// make that unlikely the ports come from below the kernel's ephemeral
// range, which the kernel never gives to an outgoing connection, a UDP
// query or a listen on port 0, and each is handed out at most once per
// test binary, from a random start so that test binaries running side by
// side rarely meet. Test binaries started as shards of one run
// (scripts/e2e.sh) never meet: TESTPORT_SHARD=i/n gives shard i (0..n-1)
// the i-th of n equal parts of the range.
package testport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var ports struct {
	sync.Mutex
	lo, hi, next int // candidates [lo, hi); next to try
}

// Addr returns "127.0.0.1:PORT" with a port that was free for TCP and UDP
// a moment ago.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// Port returns a loopback port that was free for TCP and UDP a moment ago.
func Port(t testing.TB) int {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	if ports.hi == 0 {
		ports.lo, ports.hi = Range(ephemeralLow())
		if i, n, ok := Shard(os.Getenv("TESTPORT_SHARD")); ok {
			ports.lo, ports.hi = Part(ports.lo, ports.hi, i, n)
		}
		ports.next = ports.lo + rand.IntN(ports.hi-ports.lo)
	}
	for range ports.hi - ports.lo {
		p := ports.next
		if ports.next++; ports.next >= ports.hi {
			ports.next = ports.lo
		}
		if free(p) {
			return p
		}
	}
	t.Fatalf("testport: no free loopback port in [%d, %d)", ports.lo, ports.hi)
	return 0
}

// Range is the candidate ports [lo, hi) given the low end of the
// ephemeral range: from 20000 up to it, or, when that leaves fewer than
// 1,000, 10000 up to it (at least 11000).
func Range(ephemeralLow int) (lo, hi int) {
	lo, hi = 20000, ephemeralLow
	if hi-lo < 1000 {
		lo, hi = 10000, max(hi, 11000)
	}
	return lo, hi
}

// Shard parses a TESTPORT_SHARD value "i/n" (0 <= i < n <= 64); false
// for anything else, which leaves the whole range to the binary.
func Shard(v string) (i, n int, ok bool) {
	a, b, found := strings.Cut(v, "/")
	if !found {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n < 1 || n > 64 || i < 0 || i >= n {
		return 0, 0, false
	}
	return i, n, true
}

// Part is the i-th of n equal parts of [lo, hi).
func Part(lo, hi, i, n int) (int, int) {
	size := (hi - lo) / n
	return lo + i*size, lo + (i+1)*size
}

func free(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralLow is the low end of Linux's ephemeral port range (its default
// 32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 1024 {
		return 32768
	}
	return lo
}
