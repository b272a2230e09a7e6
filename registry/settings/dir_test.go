package settings

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/spillway/spillway/internal/strictyaml"
)

// TestContentFree: a parse error keeps its file, line, field and kind
// and loses every quoted value; another error loses them too and still
// unwraps.
func TestContentFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"goQuoted", &strictyaml.Error{File: "a.yaml", Line: 3, Field: "pid.kp", Msg: `want a number, got "s3cr\"et"`, Kind: errInvalid},
			`a.yaml:3: pid.kp: want a number, got "…"`},
		{"backticks", &strictyaml.Error{File: "a.yaml", Msg: "cannot unmarshal !!str `root:x:0:0` into int", Kind: errInvalid},
			"a.yaml: cannot unmarshal !!str `…` into int"},
		{"singleQuoted", &strictyaml.Error{File: "a.yaml", Msg: "malformed YAML: unknown anchor 's3cret' referenced", Kind: errInvalid},
			"a.yaml: malformed YAML: unknown anchor '…' referenced"},
		{"unclosed", &strictyaml.Error{File: "a.yaml", Msg: `got "s3cret`, Kind: errInvalid}, `a.yaml: got "…"`},
		{"nothingQuoted", &strictyaml.Error{File: "a.yaml", Line: 1, Field: "text", Msg: "bad", Kind: errInvalid}, "a.yaml:1: text: bad"},
		{"check", fmt.Errorf("target %q is not registered: %w", "s3cret", errInvalid), `target "…" is not registered: invalid note`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := contentFree(tc.err)
			if got.Error() != tc.want {
				t.Errorf("contentFree = %q, want %q", got, tc.want)
			}
			if !errors.Is(got, errInvalid) {
				t.Errorf("contentFree(%v) does not unwrap to errInvalid", tc.err)
			}
		})
	}
}

// FuzzQuotesRedacted: a value quoted into a message never survives, and
// redacting twice is redacting once.
func FuzzQuotesRedacted(f *testing.F) {
	f.Add("want a number, got ", "root:x:0:0", "")
	f.Add("unknown anchor ", "a'b", " referenced")
	f.Add("", "`\"'\\", "x")
	f.Fuzz(func(t *testing.T, before, value, after string) {
		for _, q := range []string{strconv.Quote(value), strconv.QuoteToASCII(value)} {
			s := before + q + after
			got := quotesRedacted(s)
			if strings.ContainsAny(before, "\"`'") {
				continue // the value's quotes pair up with others
			}
			if len(value) > 0 && strings.Contains(got, value) && !strings.Contains(before+after, value) && !strings.Contains(`"…"`, value) {
				t.Errorf("quotesRedacted(%q) = %q, still has %q", s, got, value)
			}
			if again := quotesRedacted(got); again != got {
				t.Errorf("quotesRedacted(%q) = %q, again %q", s, got, again)
			}
		}
	})
}
