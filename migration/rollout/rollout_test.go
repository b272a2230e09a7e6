package rollout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, field string
	}{
		{"ok", "rules:\n  - name: t3\n    match: {tier: \"3\"}\n    percent: 10\n  - match: {}\n    percent: 0\n", ""},
		{"empty_rules", "rules: []\n", ""},
		{"percent_over", "rules:\n  - percent: 150\n", "rules[0].percent"},
		{"percent_negative", "rules:\n  - match: {}\n    percent: 5\n  - percent: -1\n", "rules[1].percent"},
		{"unknown_field", "rules:\n  - percnt: 10\n", "percnt"},
		{"unparsable", "rules: [\n", "yaml"},
		{"empty_doc", "", "empty"},
		{"two_docs", "rules: []\n---\nrules: []\n", "more than one"},
		{"empty_key", "rules:\n  - match: {\"\": x}\n    percent: 1\n", "rules[0].match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Parse = %v, want ErrInvalid naming %q", err, tt.field)
			}
		})
	}
}

func TestEligibleStableAndMonotonic(t *testing.T) {
	cfg := func(p float64) *Config {
		return &Config{Rules: []Rule{{Name: "t3", Match: map[string]string{"tier": "3"}, Percent: p}, {Name: "rest", Percent: 0}}}
	}
	var services []string
	for i := range 2000 {
		services = append(services, fmt.Sprintf("svc-%04d", i))
	}
	at := func(p float64) map[string]bool {
		out := map[string]bool{}
		for _, s := range services {
			if cfg(p).Eligible(map[string]string{"service": s, "tier": "3"}).Eligible {
				out[s] = true
			}
		}
		return out
	}
	ten, twenty := at(10), at(20)
	for s := range ten {
		if !twenty[s] {
			t.Errorf("%s eligible at 10%% but not at 20%%", s)
		}
	}
	if n := len(ten); n < 150 || n > 250 {
		t.Errorf("%d of 2000 eligible at 10%%, want about 200", n)
	}
	if n := len(at(100)); n != 2000 {
		t.Errorf("%d eligible at 100%%, want all", n)
	}
	if n := len(at(0)); n != 0 {
		t.Errorf("%d eligible at 0%%, want none", n)
	}
	d := cfg(100).Eligible(map[string]string{"service": "x", "tier": "2"})
	if d.Eligible || d.RuleName != "rest" {
		t.Errorf("tier 2 under rule %q eligible=%v, want rule rest, not eligible", d.RuleName, d.Eligible)
	}
	if d := (*Config)(nil).Eligible(map[string]string{"service": "x"}); d.Eligible || d.Rule != -1 {
		t.Errorf("nil config: %+v", d)
	}
	if Bucket("payments") != Bucket("payments") || Bucket("payments") == Bucket("payment") {
		t.Error("Bucket not stable or not spread")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("rules:\n  - name: t3\n    match: {tier: \"3\"}\n    percent: 10\n"))
	f.Add([]byte("rules: []\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config does not validate: %v", err)
		}
	})
}
