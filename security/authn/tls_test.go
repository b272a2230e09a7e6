package authn

import (
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
)

func chainOf(uris []string, dns ...string) tls.ConnectionState {
	c := &x509.Certificate{DNSNames: dns}
	for _, u := range uris {
		c.URIs = append(c.URIs, &url.URL{Scheme: strings.Split(u, ":")[0], Opaque: strings.SplitN(u, ":", 2)[1]})
	}
	return tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
}

func TestFromTLS(t *testing.T) {
	spiffe := "spiffe://example.org/ns/prod/sa/payments"
	long := "a." + strings.Repeat("b", MaxNameLen)
	tests := []struct {
		name   string
		state  tls.ConnectionState
		want   string
		wantOK bool
	}{
		{"uri_san", chainOf([]string{spiffe}), spiffe, true},
		{"uri_before_dns", chainOf([]string{spiffe}, "payments.example.org"), spiffe, true},
		{"first_uri", chainOf([]string{spiffe, "spiffe://example.org/other"}), spiffe, true},
		{"dns_san", chainOf(nil, "payments.example.org", "other.example.org"), "payments.example.org", true},
		{"no_san", chainOf(nil), "", false},
		{"too_long", chainOf(nil, long), "", false},
		{"control_byte", chainOf(nil, "pay\x00ments"), "", false},
		{"space", chainOf(nil, "pay ments"), "", false},
		{"not_verified", tls.ConnectionState{PeerCertificates: chainOf(nil, "payments").PeerCertificates}, "", false},
		{"no_certificate", tls.ConnectionState{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := FromTLS(tt.state)
			if id.Name != tt.want || ok != tt.wantOK {
				t.Errorf("FromTLS = %q, %v; want %q, %v", id.Name, ok, tt.want, tt.wantOK)
			}
			if ok && id.Method != Certificate {
				t.Errorf("Method = %q, want certificate", id.Method)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"payments", true},
		{"spiffe://example.org/ns/prod/sa/payments", true},
		{strings.Repeat("a", MaxNameLen), true},
		{strings.Repeat("a", MaxNameLen+1), false},
		{"", false},
		{"a\tb", false},
		{"é", false},
		{"a\x7f", false},
	} {
		if err := ValidateName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok %v", clip(tt.name), err, tt.ok)
		}
	}
}

// FuzzFromTLS: whatever the SANs, FromTLS never panics and a name it
// takes is a valid identity, the first URI or else the first DNS name.
func FuzzFromTLS(f *testing.F) {
	f.Add("spiffe://example.org/ns/prod/sa/payments", "payments.example.org")
	f.Add("", "payments.example.org")
	f.Add("", "")
	f.Add("urn:x:\x00", "a b")
	f.Fuzz(func(t *testing.T, uri, dns string) {
		c := &x509.Certificate{}
		if u, err := url.Parse(uri); err == nil && uri != "" {
			c.URIs = []*url.URL{u}
		}
		if dns != "" {
			c.DNSNames = []string{dns}
		}
		id, ok := FromTLS(tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}})
		if !ok {
			return
		}
		if err := ValidateName(id.Name); err != nil {
			t.Fatalf("FromTLS took %q: %v", id.Name, err)
		}
		if len(c.URIs) > 0 && id.Name != c.URIs[0].String() || len(c.URIs) == 0 && id.Name != dns {
			t.Fatalf("FromTLS = %q, want the first URI or DNS SAN (%v, %q)", id.Name, c.URIs, dns)
		}
	})
}
