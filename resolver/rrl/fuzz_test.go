package rrl

import (
	"net/netip"
	"testing"
	"time"
)

// FuzzAllow replays a byte string as responses (a source address and a
// step of the clock each) and checks what must hold for any sequence: the
// table never passes its size, and no prefix is answered more than its
// burst plus the rate over the time it was tracked; a source in the
// exempt prefix (when there is one) is always Exempt, no other one.
func FuzzAllow(f *testing.F) {
	f.Add([]byte("\x01\x00\x0a\x00\x01\x01\x00\x0a\x00\x01\x02"), uint8(3), uint8(2), uint8(4))
	f.Add([]byte("\x06\x20\x01\x0d\xb8\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\xff\x00\x7f\x00\x01\x01\x00"), uint8(1), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, ops []byte, rate, burst, size uint8) {
		cfg := Config{Rate: int(rate%50) + 1, Burst: int(burst % 50), Slip: int(rate % 4), TableSize: int(size%8) + 1, IPv4PrefixLen: int(burst%32) + 1, IPv6PrefixLen: int(size) % 129}
		if cfg.IPv6PrefixLen == 0 {
			cfg.IPv6PrefixLen = 1
		}
		exempt := netip.MustParsePrefix("10.0.7.0/24")
		if rate%2 == 0 {
			cfg.Exempt = []netip.Prefix{exempt}
		}
		l, err := New(cfg, t0)
		if err != nil {
			t.Fatal(err)
		}
		cfg = l.Config()
		type seen struct {
			first    time.Time
			answered int
		}
		// Prefixes answered since each was last inserted; an eviction
		// restarts the count, so the entries are tracked only while the
		// table has never been full.
		byKey := map[key]*seen{}
		now := t0
		for len(ops) >= 2 {
			step, kind := ops[0], ops[1]
			ops = ops[2:]
			now = now.Add(time.Duration(step) * time.Millisecond)
			var a netip.Addr
			switch n := 4; {
			case kind%2 == 0 && len(ops) >= n:
				a = netip.AddrFrom4([4]byte(ops[:n]))
				ops = ops[n:]
			case len(ops) >= 16:
				a = netip.AddrFrom16([16]byte(ops[:16]))
				ops = ops[16:]
			default:
				a = netip.AddrFrom4([4]byte{10, 0, kind, 1})
			}
			full := l.Len() >= cfg.TableSize
			v := l.Allow(a, now)
			if isExempt := cfg.Exempt != nil && exempt.Contains(a.Unmap()); (v == Exempt) != isExempt {
				t.Fatalf("%v: %v, exempt %v", a, v, isExempt)
			} else if isExempt {
				continue // not tracked: no allowance to check
			}
			if n := l.Len(); n > cfg.TableSize {
				t.Fatalf("Len = %d, want at most %d", n, cfg.TableSize)
			}
			if full {
				byKey = nil // evictions from here on
			}
			if byKey == nil {
				continue
			}
			k := l.key(a)
			s := byKey[k]
			if s == nil {
				s = &seen{first: now}
				byKey[k] = s
			}
			if v == Answer {
				s.answered++
			}
			if max := cfg.Burst + int(now.Sub(s.first)*time.Duration(cfg.Rate)/time.Second); s.answered > max {
				t.Fatalf("%v answered %d times in %v, want at most %d", a, s.answered, now.Sub(s.first), max)
			}
			if cfg.Slip == 0 && v == Slip {
				t.Fatalf("slip with Slip 0")
			}
		}
	})
}
