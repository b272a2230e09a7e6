package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"strconv"

	"github.com/spillway/spillway/security/authn"
)

// tokenCommand makes bearer tokens for the server's --tokens-file, which
// keeps only their SHA-256.
var tokenCommand = &command{
	name:    "token",
	args:    "new NAME",
	nargs:   2,
	summary: "print a fresh random bearer token for identity NAME, then its --tokens-file line",
	flags: func(*flag.FlagSet) action {
		return func(_ context.Context, e *env, args []string) error {
			if args[0] != "new" {
				return usagef("want new NAME, got %q", args[0])
			}
			name := args[1]
			if err := authn.ValidateName(name); err != nil {
				return usagef("NAME: %v", err)
			}
			if name == "anonymous" {
				return usagef(`NAME: "anonymous" is the name of callers without credentials`)
			}
			token, line, err := newToken(name)
			if err != nil {
				return err
			}
			// Line 1 the token (TOKEN=$(spillwayctl token new x | head -1)),
			// line 2 the YAML list entry for --tokens-file.
			_, err = fmt.Fprintf(e.stdout, "%s\n%s\n", token, line)
			return err
		}
	},
}

// newToken returns 32 random bytes as base64url and the tokens-file
// entry of its SHA-256 for identity name.
func newToken(name string) (token, line string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("random token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	// name is printable ASCII, where Go's quoting is YAML's.
	return token, fmt.Sprintf("- {identity: %s, sha256: %s}", strconv.Quote(name), hex.EncodeToString(sum[:])), nil
}
