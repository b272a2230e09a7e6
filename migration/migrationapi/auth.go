package migrationapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
)

var (
	// errDenied: the token is missing or wrong (PermissionDenied, 403).
	errDenied = errors.New("permission denied")
	// errNoToken: the server has no admin token, so it takes no changes
	// (FailedPrecondition, 403).
	errNoToken = errors.New("changes are disabled: start spillway with --admin-token-file FILE (admin_token_file in the YAML config) to allow them")
)

// authorizer checks the admin token of a change.
type authorizer struct {
	// sum is the SHA-256 of the token; nil when there is none. Comparing
	// fixed-size digests keeps the comparison constant-time even in the
	// token's length.
	sum []byte
}

func newAuthorizer(token string) authorizer {
	if token == "" {
		return authorizer{}
	}
	s := sha256.Sum256([]byte(token))
	return authorizer{sum: s[:]}
}

// check verifies an authorization header value, "Bearer <token>".
func (a authorizer) check(authz string) error {
	if a.sum == nil {
		return errNoToken
	}
	if authz == "" {
		return fmt.Errorf(`%w: no admin token: send "authorization: Bearer <token>" (spillwayctl: $SPILLWAY_ADMIN_TOKEN or --token)`, errDenied)
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(authz), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return fmt.Errorf(`%w: authorization: want "Bearer <token>"`, errDenied)
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(got[:], a.sum) != 1 {
		return fmt.Errorf("%w: wrong admin token", errDenied)
	}
	return nil
}

// ReadTokenFile reads the admin token from path: the whole file, surrounding
// whitespace trimmed. An empty token is an error.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%s is empty, want the admin token", path)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("%s: the token has whitespace inside, want one word", path)
	}
	return token, nil
}
