package rrl

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// count sends n responses to src spaced every, starting at start, and
// counts the verdicts.
func count(l *Limiter, src string, start time.Time, n int, every time.Duration) map[Verdict]int {
	got := map[Verdict]int{}
	a := netip.MustParseAddr(src)
	for i := range n {
		got[l.Allow(a, start.Add(time.Duration(i)*every))]++
	}
	return got
}

func TestRateAndBurst(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		n     int
		every time.Duration
		want  map[Verdict]int
	}{
		// All at once: the burst and nothing more.
		{"burst_at_once", Config{Rate: 10, Burst: 5}, 20, 0, map[Verdict]int{Answer: 5, Drop: 15}},
		{"burst_defaults_to_rate", Config{Rate: 10}, 20, 0, map[Verdict]int{Answer: 10, Drop: 10}},
		// 1,000 queries at 100/s over 10 s (the last at 9.99 s): the
		// burst of 10, then one per 100 ms: 10 + 99 = 109.
		{"steady_above_rate", Config{Rate: 10, Burst: 10}, 1000, 10 * time.Millisecond, map[Verdict]int{Answer: 109, Drop: 891}},
		// Below the rate: everything.
		{"below_rate", Config{Rate: 10, Burst: 1}, 100, 100 * time.Millisecond, map[Verdict]int{Answer: 100}},
		{"just_above_rate_burst_1", Config{Rate: 10, Burst: 1}, 100, 50 * time.Millisecond, map[Verdict]int{Answer: 50, Drop: 50}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := mustNew(t, c.cfg)
			got := count(l, "192.0.2.1", t0, c.n, c.every)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("verdicts = %v, want %v", got, c.want)
			}
		})
	}
}

func TestRefill(t *testing.T) {
	l := mustNew(t, Config{Rate: 4, Burst: 2})
	a := netip.MustParseAddr("192.0.2.1")
	steps := []struct {
		at   time.Duration
		want Verdict
	}{
		{0, Answer}, {0, Answer}, {0, Drop},
		{249 * time.Millisecond, Drop}, // a token is 250 ms
		{250 * time.Millisecond, Answer},
		{250 * time.Millisecond, Drop},
		{10 * time.Second, Answer}, // refilled to the burst, not beyond
		{10 * time.Second, Answer},
		{10 * time.Second, Drop},
	}
	for i, s := range steps {
		if got := l.Allow(a, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d at %v: %v, want %v", i, s.at, got, s.want)
		}
	}
}

func TestSlip(t *testing.T) {
	cases := []struct {
		slip int
		want string // verdicts of 8 responses after the burst of 1
	}{
		{0, "DDDDDDDD"},
		{1, "SSSSSSSS"},
		{2, "DSDSDSDS"},
		{3, "DDSDDSDD"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint("slip_", c.slip), func(t *testing.T) {
			l := mustNew(t, Config{Rate: 1, Burst: 1, Slip: c.slip})
			a := netip.MustParseAddr("2001:db8::1")
			if v := l.Allow(a, t0); v != Answer {
				t.Fatalf("first: %v, want answer", v)
			}
			var b strings.Builder
			for range 8 {
				b.WriteString(strings.ToUpper(l.Allow(a, t0).String()[:1]))
			}
			if b.String() != c.want {
				t.Errorf("verdicts = %s, want %s", b.String(), c.want)
			}
		})
	}
}

func TestPrefixes(t *testing.T) {
	cases := []struct {
		name       string
		cfg        Config
		a, b       string
		samePrefix bool
	}{
		{"v4_same_24", Config{}, "10.0.1.1", "10.0.1.254", true},
		{"v4_other_24", Config{}, "10.0.1.1", "10.0.2.1", false},
		{"loopback_127.0.1_127.0.2", Config{}, "127.0.1.1", "127.0.2.1", false},
		{"v4_len_16", Config{IPv4PrefixLen: 16}, "10.0.1.1", "10.0.2.1", true},
		{"v4_len_32", Config{IPv4PrefixLen: 32}, "10.0.1.1", "10.0.1.2", false},
		{"v6_same_56", Config{}, "2001:db8:0:100::1", "2001:db8:0:1ff:ffff::1", true},
		{"v6_other_56", Config{}, "2001:db8:0:100::1", "2001:db8:0:200::1", false},
		{"v6_len_100", Config{IPv6PrefixLen: 100}, "2001:db8::1", "2001:db8::fff:ffff", true},
		{"v6_len_100_apart", Config{IPv6PrefixLen: 100}, "2001:db8::1", "2001:db8::1000:0", false},
		{"v4_mapped_is_v4", Config{}, "::ffff:10.0.1.1", "10.0.1.9", true},
		{"v4_not_v6", Config{IPv6PrefixLen: 128, IPv4PrefixLen: 32}, "::ffff:0:10.0.1.1", "10.0.1.1", false},
		{"zone_ignored", Config{}, "fe80::1%eth0", "fe80::2", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Rate, c.cfg.Burst = 1, 3
			l := mustNew(t, c.cfg)
			count(l, c.a, t0, 3, 0) // a's burst spent
			got := l.Allow(netip.MustParseAddr(c.b), t0)
			want := Answer
			if c.samePrefix {
				want = Drop
			}
			if got != want {
				t.Errorf("%s after %s's burst: %v, want %v", c.b, c.a, got, want)
			}
			// a's allowance is not touched by b's answer.
			if v := l.Allow(netip.MustParseAddr(c.a), t0); v != Drop {
				t.Errorf("%s: %v, want drop", c.a, v)
			}
		})
	}
}

func TestInvalidSourceAnswered(t *testing.T) {
	l := mustNew(t, Config{Rate: 1, Burst: 1})
	for range 3 {
		if v := l.Allow(netip.Addr{}, t0); v != Answer {
			t.Fatalf("invalid source: %v, want answer", v)
		}
	}
	if n := l.Len(); n != 0 {
		t.Errorf("Len = %d, want 0", n)
	}
}

func TestEvictionLeastRecentlyUsed(t *testing.T) {
	l := mustNew(t, Config{Rate: 1, Burst: 2, TableSize: 3})
	allow := func(src string) Verdict { return l.Allow(netip.MustParseAddr(src), t0) }
	for _, src := range []string{"10.0.1.1", "10.0.2.1", "10.0.3.1"} {
		count(l, src, t0, 2, 0) // bursts spent
	}
	// 10.0.1.0/24 is seen again: now 10.0.2.0/24 is the least recent.
	if v := allow("10.0.1.1"); v != Drop {
		t.Fatalf("10.0.1.1: %v, want drop", v)
	}
	// A fourth prefix evicts 10.0.2.0/24, which starts again full.
	if v := allow("10.0.4.1"); v != Answer {
		t.Fatalf("10.0.4.1: %v, want answer", v)
	}
	if n := l.Len(); n != 3 {
		t.Errorf("Len = %d, want 3", n)
	}
	if v := allow("10.0.1.1"); v != Drop {
		t.Errorf("10.0.1.1 (kept, recently used): %v, want drop", v)
	}
	if v := allow("10.0.3.1"); v != Drop {
		t.Errorf("10.0.3.1 (kept): %v, want drop", v)
	}
	// 10.0.2.0/24 was forgotten: a full burst again (and this evicts 10.0.4.0/24).
	if v := allow("10.0.2.1"); v != Answer {
		t.Errorf("10.0.2.1 (evicted): %v, want answer", v)
	}
}

func TestTableBound(t *testing.T) {
	for _, size := range []int{1, 5, 2047, 2048, 100_000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			l := mustNew(t, Config{Rate: 1, TableSize: size})
			for i := range 3 * size {
				var b [16]byte
				b[0], b[1] = 0x20, 0x01
				b[4], b[5], b[6] = byte(i>>16), byte(i>>8), byte(i) // distinct /56s
				l.Allow(netip.AddrFrom16(b), t0.Add(time.Duration(i)))
			}
			n := l.Len()
			if n > size {
				t.Errorf("Len = %d after %d prefixes, want at most %d", n, 3*size, size)
			}
			// Shards of a big table fill unevenly; most of it is used.
			if n < size*9/10 {
				t.Errorf("Len = %d after %d prefixes, want at least %d", n, 3*size, size*9/10)
			}
		})
	}
}

func TestConcurrent(t *testing.T) {
	// 8 goroutines share 8 prefixes (10.0.0-3 and 10.1.0-3) at one
	// instant: each prefix answers its burst exactly once in total.
	l := mustNew(t, Config{Rate: 1, Burst: 100, TableSize: 4096})
	var mu sync.Mutex
	answered := map[string]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				src := fmt.Sprintf("10.%d.%d.1", g%2, i%4)
				if l.Allow(netip.MustParseAddr(src), t0) == Answer {
					mu.Lock()
					answered[fmt.Sprintf("10.x.%d", i%4)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range answered {
		total += n
	}
	if total != 8*100 { // 8 prefixes × burst
		t.Errorf("answered %d (%v), want 800", total, answered)
	}
}

func TestConfig(t *testing.T) {
	cases := []struct {
		cfg     Config
		wantErr string
	}{
		{Config{}, "Rate 0"},
		{Config{Rate: -1}, "Rate -1"},
		{Config{Rate: 1, Burst: -1}, "Burst -1"},
		{Config{Rate: 1, Slip: -1}, "Slip -1"},
		{Config{Rate: 1, IPv4PrefixLen: 33}, "IPv4PrefixLen 33"},
		{Config{Rate: 1, IPv6PrefixLen: 129}, "IPv6PrefixLen 129"},
		{Config{Rate: 1, TableSize: -5}, "TableSize -5"},
		{Config{Rate: 1, Exempt: []netip.Prefix{{}}}, "Exempt[0]: not a valid prefix"},
		{Config{Rate: 1, Exempt: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.2.3/16")}}, "Exempt[1] 10.1.2.3/16 has host bits set, want 10.1.0.0/16"},
		{Config{Rate: 1, Exempt: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}, "Exempt[0] ::ffff:10.0.0.0/104: want a plain"},
		{Config{Rate: 1, Exempt: make([]netip.Prefix, MaxExempt+1)}, "Exempt has 1025 prefixes"},
		{Config{Rate: 1}, ""},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%+v", c.cfg)
		if len(c.cfg.Exempt) > 4 {
			name = fmt.Sprintf("%d_exempt_prefixes", len(c.cfg.Exempt))
		}
		t.Run(name, func(t *testing.T) {
			_, err := New(c.cfg, t0)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("err = %v, want nil", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("err = %v, want one naming %q", err, c.wantErr)
			}
		})
	}
	l := mustNew(t, Config{Rate: 7})
	want := Config{Rate: 7, Burst: 7, IPv4PrefixLen: 24, IPv6PrefixLen: 56, TableSize: DefaultTableSize}
	if got := l.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
}

// TestExempt: a source in Config.Exempt is never limited and not
// tracked; IPv4-mapped sources match IPv4 prefixes; a source outside
// keeps its allowance.
func TestExempt(t *testing.T) {
	l := mustNew(t, Config{Rate: 1, Burst: 1, Slip: 1, Exempt: []netip.Prefix{
		netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("2001:db8:1::/48"),
	}})
	for _, src := range []string{"10.1.2.3", "10.1.255.255", "::ffff:10.1.0.9", "2001:db8:1:ff::1"} {
		if got := count(l, src, t0, 100, 0); fmt.Sprint(got) != fmt.Sprint(map[Verdict]int{Exempt: 100}) {
			t.Errorf("%s: %v, want all exempt", src, got)
		}
	}
	if n := l.Len(); n != 0 {
		t.Errorf("Len = %d after exempt sources only, want 0", n)
	}
	for _, src := range []string{"10.2.0.1", "2001:db8:2::1"} {
		if got := count(l, src, t0, 3, 0); fmt.Sprint(got) != fmt.Sprint(map[Verdict]int{Answer: 1, Slip: 2}) {
			t.Errorf("%s: %v, want its burst of 1 then slips", src, got)
		}
	}
}

func BenchmarkAllow(b *testing.B) {
	for _, prefixes := range []int{1, 1000, 100_000} {
		b.Run(fmt.Sprint("prefixes_", prefixes), func(b *testing.B) {
			// /32 prefixes, so each address is a prefix of its own.
			l := mustNew(b, Config{Rate: 1000, IPv4PrefixLen: 32, TableSize: DefaultTableSize})
			addrs := make([]netip.Addr, prefixes)
			for i := range addrs {
				addrs[i] = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			}
			now := t0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Allow(addrs[i%prefixes], now)
				i++
			}
		})
	}
	b.Run("parallel_1000_prefixes", func(b *testing.B) {
		l := mustNew(b, Config{Rate: 1000})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				l.Allow(netip.AddrFrom4([4]byte{10, 0, byte(i % 1000 >> 8), byte(i)}), t0)
				i++
			}
		})
	})
}
