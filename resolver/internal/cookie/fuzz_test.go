package cookie

import (
	"encoding/hex"
	"net/netip"
	"testing"
)

// FuzzParse: any option data parses exactly when its length is 8 or
// 16..40, the same from bytes and from hex; Check of it never panics and
// is Valid only for a cookie Fresh made for that address, client cookie
// and a time within its lifetime.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"2464c4abcf10c957",
		"2464c4abcf10c957010000005cf79f111f8130c3eee29480",
		"fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5",
		"22681ab97d52c298010000005cf7c57926556bd0934c72f8",
		"2464c4abcf10c95701",
		"2464c4abcf10c9570100000000000000",
	} {
		b, _ := hex.DecodeString(s)
		f.Add(b, uint32(1559731985), true)
	}
	f.Add([]byte{}, uint32(0), false)
	s := &Secret{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	f.Fuzz(func(t *testing.T, b []byte, now uint32, v4 bool) {
		ip := netip.MustParseAddr("2001:db8::53")
		if v4 {
			ip = netip.MustParseAddr("198.51.100.100")
		}
		c, err := Parse(b)
		wantOK := len(b) == ClientLen || (len(b) >= 16 && len(b) <= MaxLen)
		if (err == nil) != wantOK {
			t.Fatalf("Parse(%d bytes): err %v", len(b), err)
		}
		h, herr := ParseHex(hex.EncodeToString(b))
		if (herr == nil) != wantOK || h != c {
			t.Fatalf("ParseHex differs from Parse: %x %v, %x %v", h.Bytes(), herr, c.Bytes(), err)
		}
		if err != nil {
			return
		}
		r := s.Check(&c, ip, now)
		if (r == ClientOnly) != (len(b) == ClientLen) {
			t.Fatalf("Check(%x) = %v", b, r)
		}
		fresh := s.Fresh(&c, ip, now)
		if r == Valid {
			// A valid cookie is one Fresh makes, at the time it names.
			ts := uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
			if b[9]|b[10]|b[11] == 0 {
				if again := s.Fresh(&c, ip, ts); string(again[:]) != string(b) {
					t.Fatalf("Check(%x) valid, but Fresh at %d makes %x", b, ts, again)
				}
			}
		}
		fc, err := Parse(fresh[:])
		if err != nil || s.Check(&fc, ip, now) != Valid || fc.Client() != c.Client() {
			t.Fatalf("Fresh(%x) = %x: not valid (%v) or another client cookie", b, fresh, err)
		}
	})
}
