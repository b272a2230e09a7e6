package propagate

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Bounds of what is carried. A key whose values exceed them is not
// carried at all (see the package doc).
const (
	// MaxKeys is the most keys one Propagator carries.
	MaxKeys = 16
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 64
	// MaxValues is the most values one key may have to be carried.
	MaxValues = 4
	// MaxValueLen is the longest value carried, in bytes.
	MaxValueLen = 256
)

// ErrInvalidKey is wrapped by every error about a key name.
var ErrInvalidKey = errors.New("invalid propagation key")

// reserved are keys that are not a traffic class and must not follow a
// request to the next hop: HTTP/2 and gRPC transport headers, hop-by-hop
// HTTP headers, and credentials (a downstream service must not receive the
// caller's credentials by accident).
var reserved = map[string]string{
	"content-type":        "set by the gRPC transport",
	"user-agent":          "set by the gRPC transport",
	"te":                  "set by the gRPC transport",
	"host":                "set by the transport",
	"connection":          "a hop-by-hop HTTP header",
	"keep-alive":          "a hop-by-hop HTTP header",
	"proxy-connection":    "a hop-by-hop HTTP header",
	"transfer-encoding":   "a hop-by-hop HTTP header",
	"upgrade":             "a hop-by-hop HTTP header",
	"authorization":       "a credential: it must not follow a call to other services",
	"proxy-authorization": "a credential: it must not follow a call to other services",
	"cookie":              "a credential: it must not follow a call to other services",
}

// Config configures a Propagator.
type Config struct {
	// Keys are the metadata keys (gRPC) or header names (HTTP) carried
	// from an incoming request to the outgoing ones it causes, e.g.
	// "x-traffic-class". Required: 1 to MaxKeys distinct keys, each valid
	// by ValidateKey. The slice is copied.
	Keys []string
	// Logger gets a Debug line for every value not carried because it is
	// out of bounds; nil discards.
	Logger *slog.Logger
}

// ValidateKey reports whether key can be carried: 1 to MaxKeyLen bytes of
// lower-case letters, digits, '-', '_' and '.'; not starting with "grpc-"
// (reserved by gRPC); not ending with "-bin" (binary metadata, which
// grpc-go's route matchers ignore); not a transport, hop-by-hop or
// credential header (content-type, te, user-agent, host, connection,
// authorization, cookie, ...). The error wraps ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %q must be 1..%d characters", ErrInvalidKey, key, MaxKeyLen)
	}
	for _, c := range []byte(key) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: %q: want lower-case letters, digits, '-', '_' or '.'", ErrInvalidKey, key)
		}
	}
	if strings.HasPrefix(key, "grpc-") {
		return fmt.Errorf("%w: %q: the grpc- prefix is reserved by gRPC", ErrInvalidKey, key)
	}
	if strings.HasSuffix(key, "-bin") {
		return fmt.Errorf("%w: %q: binary (-bin) metadata is not carried: route rules cannot match it", ErrInvalidKey, key)
	}
	if why, ok := reserved[key]; ok {
		return fmt.Errorf("%w: %q is %s", ErrInvalidKey, key, why)
	}
	return nil
}

// validateKeys checks a key list, naming the bad element as keys[i].
func validateKeys(keys []string) error {
	if len(keys) == 0 {
		return fmt.Errorf("keys: %w: at least one key is required", ErrInvalidKey)
	}
	if len(keys) > MaxKeys {
		return fmt.Errorf("keys: %w: %d keys, at most %d", ErrInvalidKey, len(keys), MaxKeys)
	}
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if err := ValidateKey(k); err != nil {
			return fmt.Errorf("keys[%d]: %w", i, err)
		}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("keys[%d]: %w: %q repeats keys[%d]", i, ErrInvalidKey, k, j)
		}
		seen[k] = i
	}
	return nil
}

// ParseKeys parses a comma-separated key list, as given in a flag or an
// environment variable ("x-traffic-class, x-tenant"): blanks around each
// key are trimmed, and the list is validated as Config.Keys is. It does
// not lower-case: "X-Traffic-Class" is refused, so that a key is spelled
// one way everywhere it is configured.
func ParseKeys(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("keys: %w: at least one key is required", ErrInvalidKey)
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxKeys {
		return nil, fmt.Errorf("keys: %w: %d keys, at most %d", ErrInvalidKey, len(parts), MaxKeys)
	}
	keys := make([]string, len(parts))
	for i, p := range parts {
		keys[i] = strings.TrimSpace(p)
	}
	if err := validateKeys(keys); err != nil {
		return nil, err
	}
	return keys, nil
}
