package authn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sum(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

func tokensYAML(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(&b, "- identity: %s\n  sha256: %s\n", pairs[i], sum(pairs[i+1]))
	}
	return b.String()
}

func TestTokenLookup(t *testing.T) {
	set, err := ParseTokens("t.yaml", []byte(tokensYAML("payments", "tok-payments", "checkout", "tok-checkout", "spiffe://e/x", "tok-x")))
	if err != nil {
		t.Fatal(err)
	}
	set, err = set.WithAdmin("tok-admin")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		token  string
		want   string
		wantOK bool
	}{
		{"tok-payments", "payments", true},
		{"tok-checkout", "checkout", true},
		{"tok-x", "spiffe://e/x", true},
		{"tok-admin", AdminIdentity, true},
		{"tok-paymentz", "", false},
		{"tok-payments ", "", false},
		{"", "", false},
		{sum("tok-payments"), "", false}, // the digest is not the token
	}
	for _, tt := range tests {
		id, ok := set.Lookup(tt.token)
		if id.Name != tt.want || ok != tt.wantOK {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.token, id.Name, ok, tt.want, tt.wantOK)
		}
		if ok && id.Method != Token {
			t.Errorf("Lookup(%q).Method = %q, want token", tt.token, id.Method)
		}
	}
	if set.Len() != 4 {
		t.Errorf("Len = %d, want 4", set.Len())
	}
	var empty *TokenSet
	if _, ok := empty.Lookup("tok-payments"); ok {
		t.Error("nil TokenSet knows a token")
	}
}

func TestParseTokensErrors(t *testing.T) {
	good := sum("x")
	tests := []struct{ name, in, want string }{
		{"not_list", "identity: a\n", "t.yaml:1: tokens: want a list"},
		{"item_not_mapping", "- a\n", "t.yaml:1: [0]: want a mapping"},
		{"unknown_key", "- identity: a\n  sha256: " + good + "\n  token: x\n", "t.yaml:3: [0].token: unknown key"},
		{"missing_sha", "- identity: a\n", "t.yaml:1: [0].sha256: missing"},
		{"missing_identity", "- sha256: " + good + "\n", "t.yaml:1: [0].identity: missing"},
		{"bad_hex", "- identity: a\n  sha256: xyz\n", "t.yaml:2: [0].sha256: want 64 hex digits"},
		{"short_hex", "- identity: a\n  sha256: abcd\n", "t.yaml:2: [0].sha256: want 64 hex digits"},
		{"bad_identity", "- identity: \"a b\"\n  sha256: " + good + "\n", "t.yaml:1: [0].identity: identity \"a b\" has byte 0x20"},
		{"anonymous", "- identity: anonymous\n  sha256: " + good + "\n", "t.yaml:1: [0].identity: \"anonymous\""},
		{"dup_identity", "- {identity: a, sha256: " + good + "}\n- {identity: a, sha256: " + sum("y") + "}\n", "t.yaml:2: [1].identity: a is also entry [0]"},
		{"dup_digest", "- {identity: a, sha256: " + good + "}\n- {identity: b, sha256: " + good + "}\n", "t.yaml:2: [1].sha256: the same token as identity a"},
		{"nested_value", "- identity: [a]\n  sha256: " + good + "\n", "t.yaml:1: [0].identity: want a string"},
		{"syntax", "- identity: [\n", "t.yaml: yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTokens("t.yaml", []byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseTokens = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestWithAdminConflicts(t *testing.T) {
	set, err := ParseTokens("t.yaml", []byte(tokensYAML("admin", "a", "ops", "b")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.WithAdmin("c"); err == nil || !strings.Contains(err.Error(), "identity admin") {
		t.Errorf("WithAdmin with admin in the file = %v, want an error naming identity admin", err)
	}
	set, _ = ParseTokens("t.yaml", []byte(tokensYAML("ops", "b")))
	if _, err := set.WithAdmin("b"); err == nil || !strings.Contains(err.Error(), "identity ops") {
		t.Errorf("WithAdmin with ops's token = %v, want an error naming ops", err)
	}
}

func TestTokenFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokensYAML("payments", "tok-1"))
	reg := prometheus.NewRegistry()
	tf, err := OpenTokens(TokensConfig{Path: path, AdminToken: "tok-admin", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(step, token, want string) {
		t.Helper()
		id, _ := tf.Lookup(token)
		if id.Name != want {
			t.Errorf("%s: Lookup(%q) = %q, want %q", step, token, id.Name, want)
		}
	}
	lookup("first", "tok-1", "payments")
	lookup("first", "tok-admin", "admin")

	write("- identity: payments\n  sha256: nothex\n")
	if tf.Check() {
		t.Error("Check of a bad file = true")
	}
	lookup("bad", "tok-1", "payments")
	lookup("bad", "tok-admin", "admin")
	if got := testutil.ToFloat64(tf.failures); got != 1 {
		t.Errorf("failures = %v, want 1", got)
	}

	write(tokensYAML("payments", "tok-2"))
	if !tf.Check() {
		t.Error("Check of a good new file = false")
	}
	lookup("good", "tok-1", "")
	lookup("good", "tok-2", "payments")
	lookup("good", "tok-admin", "admin")
	if n, err := testutil.GatherAndCount(reg, "spillway_authn_tokens_reload_failures_total"); err != nil || n != 1 {
		t.Errorf("registered metric: %d (%v), want 1", n, err)
	}

	// A rotation that gives admin to the file is refused, the old set
	// stays.
	write(tokensYAML("admin", "tok-3"))
	tf.Check()
	lookup("admin_clash", "tok-2", "payments")
	lookup("admin_clash", "tok-3", "")
}

func TestOpenTokensWithoutFile(t *testing.T) {
	tf, err := OpenTokens(TokensConfig{AdminToken: "tok-admin"})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tf.Lookup("tok-admin"); !ok || id.Name != "admin" {
		t.Errorf("Lookup(admin token) = %v, %v; want admin", id, ok)
	}
	if tf.Check() {
		t.Error("Check without a file = true")
	}
	tf.Run(context.Background()) // returns at once
	if _, err := OpenTokens(TokensConfig{Path: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("OpenTokens of a missing file = nil error")
	}
}

func TestTokenFileRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	os.WriteFile(path, []byte(tokensYAML("a", "tok-a")), 0o600)
	synctest.Test(t, func(t *testing.T) {
		tf, err := OpenTokens(TokensConfig{Path: path, Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { tf.Run(ctx); close(done) }()
		os.WriteFile(path, []byte(tokensYAML("b", "tok-b")), 0o600)
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if id, _ := tf.Lookup("tok-b"); id.Name != "b" {
			t.Errorf("after one interval Lookup(tok-b) = %q, want b", id.Name)
		}
		cancel()
		<-done
	})
}

// FuzzParseTokens: ParseTokens never panics; every entry of a set it
// accepts is found by the digest it was given, and errors name the file.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte(tokensYAML("payments", "a", "spiffe://e/x", "b")))
	f.Add([]byte("- {identity: a, sha256: " + sum("a") + "}\n"))
	f.Add([]byte("- identity: a\n"))
	f.Add([]byte("[]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := ParseTokens("f.yaml", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range set.entries {
			if ValidateName(e.identity) != nil || seen[e.identity] {
				t.Fatalf("accepted identity %q (dup %v)", e.identity, seen[e.identity])
			}
			seen[e.identity] = true
		}
	})
}
