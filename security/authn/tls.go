package authn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// MaxNameLen bounds an identity name, from a certificate or a token file.
const MaxNameLen = 512

// FromTLS returns the identity a verified client certificate proves:
// its first URI SAN, else its first DNS SAN. It reports false when the
// handshake verified no chain (no certificate, or one that was not
// checked against --client-ca) or the certificate has no usable name
// (see ValidateName).
func FromTLS(state tls.ConnectionState) (Identity, bool) {
	id, err := fromTLS(state)
	return id, err == nil && !id.Anonymous()
}

var errNoVerifiedChain = errors.New("no verified client certificate")

// fromTLS is FromTLS with the reason: errNoVerifiedChain when there is no
// verified certificate (the caller may fall back to a token), another
// error when a verified certificate carries no usable name.
func fromTLS(state tls.ConnectionState) (Identity, error) {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return Identity{}, errNoVerifiedChain
	}
	return FromCertificate(state.VerifiedChains[0][0])
}

// FromCertificate returns the identity cert names, by the rule FromTLS
// applies to a verified client certificate: its first URI SAN, else its
// first DNS SAN. A replica publishes its own certificate's identity so
// that others know which certificate speaks for it.
func FromCertificate(leaf *x509.Certificate) (Identity, error) {
	var name, field string
	switch {
	case len(leaf.URIs) > 0 && leaf.URIs[0] != nil:
		name, field = leaf.URIs[0].String(), "certificate.uri_san"
	case len(leaf.DNSNames) > 0:
		name, field = leaf.DNSNames[0], "certificate.dns_san"
	default:
		return Identity{}, &Error{Field: "certificate", Reason: "no URI or DNS SAN to take the identity from"}
	}
	if err := ValidateName(name); err != nil {
		return Identity{}, &Error{Field: field, Reason: err.Error()}
	}
	return Identity{Name: name, Method: Certificate}, nil
}

// ValidateName checks an identity name: 1 to MaxNameLen bytes of
// printable ASCII without spaces (what a URI or a DNS name is made of), so
// a name can go into a log line, an audit entry or a denial as it is.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("empty identity")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("identity of %d bytes, want at most %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("identity %q has byte %#02x at %d, want printable ASCII without spaces", clip(name), c, i)
		}
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
