package cookie

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func secret(t testing.TB, s string) *Secret {
	t.Helper()
	return (*Secret)(mustHex(t, s))
}

func mustParse(t testing.TB, s string) Cookie {
	t.Helper()
	c, err := ParseHex(s)
	if err != nil {
		t.Fatalf("ParseHex(%s): %v", s, err)
	}
	return c
}

// TestRFC9018Vectors are the worked examples of RFC 9018 appendix A:
// the server cookie made for a query, and whether the cookie a query
// carries is valid, for the secrets, addresses and times given there.
func TestRFC9018Vectors(t *testing.T) {
	const (
		secret1   = "e5e973e5a6b2a43f48e7dc849e37bfcf"
		oldSecret = "dd3bdf9344b678b185a6f5cb60fca715"
		newSecret = "445536bcd2513298075a5d379663c962"
	)
	cases := []struct {
		name   string
		secret string
		ip     string
		query  string // the query's COOKIE data
		// checkAt, when set, is a time at which the query's cookie must
		// be valid under checkSecret (secret when "").
		checkAt     uint32
		checkSecret string
		now         uint32 // the reply's time
		result      Result // Check at now
		reply       string // Fresh at now
	}{
		{
			name: "A.1_learning_a_new_server_cookie", secret: secret1, ip: "198.51.100.100",
			query: "2464c4abcf10c957", now: 1559731985, result: ClientOnly,
			reply: "2464c4abcf10c957010000005cf79f111f8130c3eee29480",
		},
		{
			name: "A.2_the_same_client_learning_a_renewed_server_cookie", secret: secret1, ip: "198.51.100.100",
			query:   "2464c4abcf10c957010000005cf79f111f8130c3eee29480",
			checkAt: 1559731985, now: 1559734385, result: Valid,
			reply: "2464c4abcf10c957010000005cf7a871d4a564a1442aca77",
		},
		{
			// Reserved bytes set by another implementation are hashed as
			// sent. At the reply's time the cookie is 6,715 s old, past
			// the hour this server accepts.
			name: "A.3_another_client_learning_a_renewed_server_cookie", secret: secret1, ip: "203.0.113.203",
			query:   "fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5",
			checkAt: 1559727985, now: 1559734700, result: Invalid,
			reply: "fc93fc62807ddb86010000005cf7a9acf73a7810aca2381e",
		},
		{
			name: "A.4_ipv6_query_with_rolled_over_secret", secret: newSecret, ip: "2001:db8:220:1:59de:d0f4:8769:82b8",
			query:   "22681ab97d52c298010000005cf7c57926556bd0934c72f8",
			checkAt: 1559741817, checkSecret: oldSecret, now: 1559741961, result: Invalid,
			reply: "22681ab97d52c298010000005cf7c609a6bb79d16625507a",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, ip, q := secret(t, c.secret), netip.MustParseAddr(c.ip), mustParse(t, c.query)
			if c.checkAt != 0 {
				cs := s
				if c.checkSecret != "" {
					cs = secret(t, c.checkSecret)
				}
				if got := cs.Check(&q, ip, c.checkAt); got != Valid {
					t.Errorf("Check at %d = %v, want valid", c.checkAt, got)
				}
			}
			if got := s.Check(&q, ip, c.now); got != c.result {
				t.Errorf("Check at %d = %v, want %v", c.now, got, c.result)
			}
			fresh := s.Fresh(&q, ip, c.now)
			if got := hex.EncodeToString(fresh[:]); got != c.reply {
				t.Errorf("Fresh = %s, want %s", got, c.reply)
			}
			r, _ := Parse(fresh[:])
			if got := s.Check(&r, ip, c.now); got != Valid {
				t.Errorf("Check(Fresh) = %v, want valid", got)
			}
		})
	}
}

// TestParseLengths: 8 bytes (client cookie alone) and 16..40 (with a
// server cookie) parse; every other length from 0 to 41 is malformed.
func TestParseLengths(t *testing.T) {
	for n := 0; n <= 41; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i + 1)
		}
		wantOK := n == 8 || (n >= 16 && n <= 40)
		for _, how := range []string{"bytes", "hex"} {
			var c Cookie
			var err error
			if how == "bytes" {
				c, err = Parse(b)
			} else {
				c, err = ParseHex(hex.EncodeToString(b))
			}
			if (err == nil) != wantOK {
				t.Errorf("%s: %d bytes: err = %v, want ok %v", how, n, err, wantOK)
				continue
			}
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("%s: %d bytes: err = %v, want ErrMalformed", how, n, err)
				}
				continue
			}
			if got := c.Bytes(); string(got) != string(b) {
				t.Errorf("%s: %d bytes: Bytes = %x, want %x", how, n, got, b)
			}
			if cc := c.Client(); string(cc[:]) != string(b[:8]) || string(c.Server()) != string(b[8:]) {
				t.Errorf("%s: %d bytes: client %x server %x, want %x %x", how, n, cc, c.Server(), b[:8], b[8:])
			}
		}
	}
}

func TestParseHexBad(t *testing.T) {
	for _, s := range []string{
		"2464c4abcf10c95",        // odd
		"2464c4abcf10c95g",       // not hex
		"2464c4abcf10c9 7",       // a space
		strings.Repeat("00", 41), // too long
		"2464C4ABCF10C957" + "zz" + strings.Repeat("00", 7),
	} {
		if _, err := ParseHex(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseHex(%q): err = %v, want ErrMalformed", s, err)
		}
	}
	// Upper case is hex too.
	if c, err := ParseHex("2464C4ABCF10C957"); err != nil || hex.EncodeToString(c.Bytes()) != "2464c4abcf10c957" {
		t.Errorf("ParseHex upper case = %x, %v", c.Bytes(), err)
	}
}

// TestCheck: a fresh cookie is valid for its address and secret within
// [made-3600s... made+300s], and invalid otherwise.
func TestCheck(t *testing.T) {
	s := secret(t, "000102030405060708090a0b0c0d0e0f")
	other := secret(t, "0f0e0d0c0b0a09080706050403020100")
	ip4, ip6 := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")
	const made = 1_700_000_000
	client := mustParse(t, "0123456789abcdef")
	fresh := func(s *Secret, ip netip.Addr, at uint32) Cookie {
		b := s.Fresh(&client, ip, at)
		c, _ := Parse(b[:])
		return c
	}
	c4, c6 := fresh(s, ip4, made), fresh(s, ip6, made)
	bad := func(edit func(b []byte)) Cookie {
		b := c4.Bytes()
		cp := append([]byte(nil), b...)
		edit(cp)
		c, err := Parse(cp)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cases := []struct {
		name string
		c    Cookie
		s    *Secret
		ip   string
		now  uint32
		want Result
	}{
		{"client_only", client, s, "192.0.2.7", made, ClientOnly},
		{"good", c4, s, "192.0.2.7", made, Valid},
		{"good_ipv6", c6, s, "2001:db8::7", made, Valid},
		{"good_ipv4_mapped", c4, s, "::ffff:192.0.2.7", made, Valid},
		{"wrong_ip", c4, s, "192.0.2.8", made, Invalid},
		{"wrong_ip_family", c6, s, "192.0.2.7", made, Invalid},
		{"wrong_secret", c4, other, "192.0.2.7", made, Invalid},
		{"hour_old", c4, s, "192.0.2.7", made + 3600, Valid},
		{"too_old", c4, s, "192.0.2.7", made + 3601, Invalid},
		{"five_minutes_ahead", c4, s, "192.0.2.7", made - 300, Valid},
		{"future", c4, s, "192.0.2.7", made - 301, Invalid},
		{"half_the_clock_away", c4, s, "192.0.2.7", made + 1<<31, Invalid},
		{"version_2", bad(func(b []byte) { b[8] = 2 }), s, "192.0.2.7", made, Invalid},
		{"reserved_changed", bad(func(b []byte) { b[9] = 1 }), s, "192.0.2.7", made, Invalid},
		{"hash_changed", bad(func(b []byte) { b[23] ^= 1 }), s, "192.0.2.7", made, Invalid},
		{"client_changed", bad(func(b []byte) { b[0] ^= 1 }), s, "192.0.2.7", made, Invalid},
		{"server_cookie_8_bytes", mustParse(t, "0123456789abcdef0123456789abcdef"), s, "192.0.2.7", made, Invalid},
		{"server_cookie_32_bytes", mustParse(t, "0123456789abcdef"+strings.Repeat("01", 32)), s, "192.0.2.7", made, Invalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.Check(&c.c, netip.MustParseAddr(c.ip), c.now); got != c.want {
				t.Errorf("Check = %v, want %v", got, c.want)
			}
		})
	}
	// Serial number arithmetic: a cookie made just before the 32-bit
	// seconds wrap is valid just after it.
	wrap := fresh(s, ip4, 1<<32-10)
	if got := s.Check(&wrap, ip4, 20); got != Valid {
		t.Errorf("across the wrap: %v, want valid", got)
	}
}

func TestFresh(t *testing.T) {
	s := secret(t, "000102030405060708090a0b0c0d0e0f")
	c := mustParse(t, "0123456789abcdef"+"01000000"+"5cf79f11"+"0000000000000000")
	ip := netip.MustParseAddr("192.0.2.7")
	f := s.Fresh(&c, ip, 0x11223344)
	if got := hex.EncodeToString(f[:16]); got != "0123456789abcdef0100000011223344" {
		t.Errorf("Fresh head = %s, want the client cookie, version 1, reserved 0, the time", got)
	}
	if g := s.Fresh(&c, ip, 0x11223345); g == f {
		t.Error("Fresh a second later gave the same cookie")
	}
	if g := s.Fresh(&c, netip.MustParseAddr("192.0.2.8"), 0x11223344); g == f {
		t.Error("Fresh for another address gave the same cookie")
	}
}

func TestAllocs(t *testing.T) {
	s := secret(t, "000102030405060708090a0b0c0d0e0f")
	ip := netip.MustParseAddr("2001:db8::1")
	h := "0123456789abcdef010000005cf79f111f8130c3eee29480"
	n := testing.AllocsPerRun(100, func() {
		c, _ := ParseHex(h)
		s.Check(&c, ip, 1559731985)
		s.Fresh(&c, ip, 1559731985)
	})
	if n != 0 {
		t.Errorf("ParseHex, Check and Fresh allocate %v times, want 0", n)
	}
}

func BenchmarkCookie(b *testing.B) {
	s := secret(b, "000102030405060708090a0b0c0d0e0f")
	ip := netip.MustParseAddr("192.0.2.1")
	client := mustParse(b, "0123456789abcdef")
	f := s.Fresh(&client, ip, 1_700_000_000)
	h := hex.EncodeToString(f[:])
	b.Run("parse_check_fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, _ := ParseHex(h)
			s.Check(&c, ip, 1_700_000_000)
			s.Fresh(&c, ip, 1_700_000_000)
		}
	})
}
