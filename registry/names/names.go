package names

import (
	"errors"
	"fmt"
	"strings"
)

// Limits of names.
const (
	MaxLabelLen = 63  // one DNS label
	MaxNameLen  = 253 // a DNS name without the trailing dot
)

// ErrInvalid is wrapped by every validation error, so edges can map it to
// InvalidArgument / HTTP 400 with errors.Is.
var ErrInvalid = errors.New("invalid")

// FieldError names the field that failed validation.
type FieldError struct {
	Field  string // dotted path, e.g. "endpoint.ports[1].name"
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) true for every FieldError.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Errorf returns a *FieldError for field with the formatted reason.
func Errorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ValidateLabel checks one DNS label: 1..63 characters of a-z, 0-9 and '-',
// not starting or ending with '-'. Upper case is rejected; callers
// lower-case the names they own first.
func ValidateLabel(field, l string) error {
	if l == "" {
		return Errorf(field, "must not be empty")
	}
	if len(l) > MaxLabelLen {
		return Errorf(field, "%q is %d characters, a DNS label has at most %d", l, len(l), MaxLabelLen)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return Errorf(field, "%q: character %q not allowed in a DNS label (a-z, 0-9, -)", l, c)
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return Errorf(field, "%q must not start or end with '-'", l)
	}
	return nil
}

// NormalizeService lower-cases a service name and strips one trailing dot.
func NormalizeService(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// ValidateService checks a service name: one or more DNS labels joined by
// dots (e.g. "payments" or "payments.prod"), at most 253 characters.
func ValidateService(field, name string) error {
	if name == "" {
		return Errorf(field, "must not be empty")
	}
	if len(name) > MaxNameLen {
		return Errorf(field, "%d characters, a DNS name has at most %d", len(name), MaxNameLen)
	}
	for i, l := range strings.Split(name, ".") {
		if err := ValidateLabel(field, l); err != nil {
			fe := err.(*FieldError)
			fe.Reason = fmt.Sprintf("label %d: %s", i+1, fe.Reason)
			return fe
		}
	}
	return nil
}
