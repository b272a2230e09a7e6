package names

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateLabel(t *testing.T) {
	tests := []struct {
		name, label, reason string // reason "" means valid
	}{
		{"ok", "zone-a", ""},
		{"digits", "10-0-0-7-8080", ""},
		{"max", strings.Repeat("a", 63), ""},
		{"empty", "", "must not be empty"},
		{"too_long", strings.Repeat("a", 64), "at most 63"},
		{"upper", "Zone", "not allowed"},
		{"underscore", "a_b", "not allowed"},
		{"leading_dash", "-a", "start or end"},
		{"trailing_dash", "a-", "start or end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateLabel("endpoint.id", tt.label)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("ValidateLabel(%q) = %v, want nil", tt.label, err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidateLabel(%q) = %v, want a *FieldError wrapping ErrInvalid", tt.label, err)
			}
			if fe.Field != "endpoint.id" || !strings.Contains(fe.Reason, tt.reason) {
				t.Errorf("ValidateLabel(%q) = %q, want field endpoint.id and reason with %q", tt.label, err, tt.reason)
			}
		})
	}
}

func TestValidateService(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"payments", true},
		{"payments.prod", true},
		{"a", true},
		{"", false},
		{"pay..ments", false},
		{".payments", false},
		{"Payments", false}, // callers normalise first
		{strings.Repeat(strings.Repeat("a", 60)+".", 5), false},
	}
	for _, tt := range tests {
		err := ValidateService("service", tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateService(%.20q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "service: ") {
			t.Errorf("ValidateService(%.20q) = %q, want the field named first", tt.name, err)
		}
	}
	if got, want := ValidateService("service", "pay..ments").Error(), "service: label 2: must not be empty"; got != want {
		t.Errorf("ValidateService(pay..ments) = %q, want %q", got, want)
	}
}

func TestNormalizeService(t *testing.T) {
	if got, want := NormalizeService("Payments.Prod."), "payments.prod"; got != want {
		t.Errorf("NormalizeService = %q, want %q", got, want)
	}
}

// FuzzValidateService: a name either fails with a *FieldError or is made
// only of valid labels within the length limit; it never panics.
func FuzzValidateService(f *testing.F) {
	for _, s := range []string{"payments", "payments.prod", "", "a..b", "-a", "Zone", strings.Repeat("a.", 130)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateService("service", s)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "service" {
				t.Fatalf("ValidateService(%q) = %v, want a *FieldError for service", s, err)
			}
			return
		}
		if len(s) > MaxNameLen {
			t.Fatalf("ValidateService(%q) accepted %d characters", s, len(s))
		}
		for _, l := range strings.Split(s, ".") {
			if ValidateLabel("l", l) != nil {
				t.Fatalf("ValidateService(%q) accepted the bad label %q", s, l)
			}
		}
	})
}
