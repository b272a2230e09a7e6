package main

import (
	"strings"
	"testing"

	"github.com/spillway/spillway/security/authn"
)

func TestCLITokenNew(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range []string{"payments", "spiffe://example.org/ns/prod/sa/payments", `odd"name\x`} {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			out := mustCtl(t, "127.0.0.1:1", "token", "new", name) // no server needed
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2 {
				t.Fatalf("output %q, want two lines", out)
			}
			token, line := lines[0], lines[1]
			if len(token) != 43 || seen[token] {
				t.Errorf("token %q: want 43 base64url characters, fresh each time", token)
			}
			seen[token] = true
			set, err := authn.ParseTokens("tokens.yaml", []byte(line+"\n"))
			if err != nil {
				t.Fatalf("the printed line %q does not parse: %v", line, err)
			}
			if id, ok := set.Lookup(token); !ok || id.Name != name || id.Method != authn.Token {
				t.Errorf("Lookup(printed token) = %v, %v; want %q", id, ok, name)
			}
			if strings.Contains(line, token) {
				t.Errorf("the tokens-file line %q holds the plaintext token", line)
			}
		})
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "old", "x"}, `want new NAME, got "old"`},
		{[]string{"token", "new"}, "want new NAME, got 1 arguments"},
		{[]string{"token", "new", "a b"}, "NAME: identity"},
		{[]string{"token", "new", "anonymous"}, "NAME: \"anonymous\""},
	} {
		r := ctl(t, "127.0.0.1:1", tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("spillwayctl %s = exit %d, stderr %q; want exit %d with %q", strings.Join(tt.args, " "), r.code, r.stderr, exitUsage, tt.want)
		}
	}
}
