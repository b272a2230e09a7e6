package registry

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spillway/spillway/registry/names"
)

// Limits on endpoint fields. They keep one endpoint small enough that a
// 10,000-endpoint service stays cheap to copy and to serve.
const (
	MaxLabelLen       = names.MaxLabelLen // one DNS label
	MaxNameLen        = names.MaxNameLen  // a DNS name without the trailing dot
	MaxPorts          = 16
	MaxMetadataKeys   = 32
	MaxMetadataKeyLen = 63
	MaxMetadataValLen = 256
	MaxMetadataBytes  = 4096 // sum of all keys and values
	MaxWeight         = 65535
	DefaultWeight     = 100
)

// ErrInvalid is wrapped by every validation error, so edges can map it to
// InvalidArgument / HTTP 400 with errors.Is. It is names.ErrInvalid.
var ErrInvalid = names.ErrInvalid

// FieldError names the field that failed validation (names.FieldError).
type FieldError = names.FieldError

func fieldErr(field, format string, args ...any) error {
	return names.Errorf(field, format, args...)
}

// Health is an endpoint's serving state.
type Health string

const (
	Healthy   Health = "healthy"
	Draining  Health = "draining" // finishing in-flight work, takes no new traffic
	Unhealthy Health = "unhealthy"
)

// Valid reports whether h is one of the defined states.
func (h Health) Valid() bool { return h == Healthy || h == Draining || h == Unhealthy }

// Source says which feed owns an endpoint. A source may only change its own
// endpoints.
type Source string

const (
	SourceVM         Source = "vm"
	SourceKubernetes Source = "kubernetes"
	SourceStatic     Source = "static"
)

// Valid reports whether s is a known source.
func (s Source) Valid() bool { return s == SourceVM || s == SourceKubernetes || s == SourceStatic }

// Protocol is a port's transport protocol.
type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Port is one named port of an endpoint; the name becomes the SRV label
// (_<name>._<protocol>.<service>).
type Port struct {
	Name     string
	Number   uint16
	Protocol Protocol
}

// Locality places an endpoint. Zone is what zone-aware routing uses; any
// field may be empty when unknown.
type Locality struct {
	Region  string
	Zone    string
	SubZone string
}

// Endpoint is one instance of a service. Endpoints held by the store are
// immutable: callers must not modify an Endpoint they got from a Snapshot.
type Endpoint struct {
	// ID is stable across restarts and unique within the service; it is a
	// DNS label so it can name the endpoint's host record.
	ID       string
	Address  netip.Addr
	Ports    []Port
	Locality Locality
	Health   Health
	// Weight is relative, 1..MaxWeight; zero means DefaultWeight when
	// normalised.
	Weight     uint32
	Metadata   map[string]string
	Source     Source
	Registered time.Time
	// LastSeen is when the owning source last confirmed the endpoint. The
	// store does not bump it on heartbeats (they cost no write); the VM
	// source reports the live value through its API.
	LastSeen time.Time
}

// Clone returns a deep copy that the caller may modify.
func (e *Endpoint) Clone() *Endpoint {
	c := *e
	c.Ports = slices.Clone(e.Ports)
	c.Metadata = maps.Clone(e.Metadata)
	return &c
}

// Equal reports whether two endpoints carry the same content, ignoring
// LastSeen (which changes without changing what is served).
func (e *Endpoint) Equal(o *Endpoint) bool {
	return e.ID == o.ID && e.Address == o.Address && slices.Equal(e.Ports, o.Ports) &&
		e.Locality == o.Locality && e.Health == o.Health && e.Weight == o.Weight &&
		maps.Equal(e.Metadata, o.Metadata) && e.Source == o.Source && e.Registered.Equal(o.Registered)
}

// Port returns the port with the given name.
func (e *Endpoint) Port(name string) (Port, bool) {
	for _, p := range e.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return Port{}, false
}

// Normalize fills defaults (weight, health, protocol) and lower-cases the
// names that DNS treats case-insensitively. It does not validate.
func (e *Endpoint) Normalize() {
	if e.Weight == 0 {
		e.Weight = DefaultWeight
	}
	if e.Health == "" {
		e.Health = Healthy
	}
	e.ID = strings.ToLower(e.ID)
	for i := range e.Ports {
		e.Ports[i].Name = strings.ToLower(e.Ports[i].Name)
		if e.Ports[i].Protocol == "" {
			e.Ports[i].Protocol = TCP
		}
		e.Ports[i].Protocol = Protocol(strings.ToLower(string(e.Ports[i].Protocol)))
	}
	if e.Address.Is4In6() {
		e.Address = e.Address.Unmap()
	}
}

// Validate checks every field and returns a *FieldError naming the first bad
// one; prefix is prepended to field names ("endpoint" gives
// "endpoint.address").
func (e *Endpoint) Validate(prefix string) error {
	f := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	if !e.Address.IsValid() {
		return fieldErr(f("address"), "must be an IPv4 or IPv6 address")
	}
	if e.Address.Zone() != "" {
		return fieldErr(f("address"), "must not carry an IPv6 zone (%q)", e.Address.Zone())
	}
	if e.Address.IsUnspecified() || e.Address.IsMulticast() {
		return fieldErr(f("address"), "%s cannot receive traffic", e.Address)
	}
	if len(e.Ports) == 0 {
		return fieldErr(f("ports"), "at least one port is required")
	}
	if len(e.Ports) > MaxPorts {
		return fieldErr(f("ports"), "%d ports, at most %d", len(e.Ports), MaxPorts)
	}
	seen := make(map[string]bool, len(e.Ports))
	for i, p := range e.Ports {
		pf := f(fmt.Sprintf("ports[%d]", i))
		if err := ValidateLabel(pf+".name", p.Name); err != nil {
			return err
		}
		if seen[p.Name] {
			return fieldErr(pf+".name", "duplicate port name %q", p.Name)
		}
		seen[p.Name] = true
		if p.Number == 0 {
			return fieldErr(pf+".number", "must be 1..65535")
		}
		if p.Protocol != TCP && p.Protocol != UDP {
			return fieldErr(pf+".protocol", "%q, want tcp or udp", p.Protocol)
		}
	}
	// The id comes after address and ports: a missing id is often derived
	// from them, and their error is the useful one.
	if err := ValidateLabel(f("id"), e.ID); err != nil {
		return err
	}
	for _, l := range []struct{ name, v string }{
		{"locality.region", e.Locality.Region},
		{"locality.zone", e.Locality.Zone},
		{"locality.sub_zone", e.Locality.SubZone},
	} {
		if l.v == "" {
			continue
		}
		if err := ValidateLabel(f(l.name), l.v); err != nil {
			return err
		}
	}
	if !e.Health.Valid() {
		return fieldErr(f("health"), "%q, want healthy, draining or unhealthy", e.Health)
	}
	if e.Weight < 1 || e.Weight > MaxWeight {
		return fieldErr(f("weight"), "%d, want 1..%d", e.Weight, MaxWeight)
	}
	if err := validateMetadata(f("metadata"), e.Metadata); err != nil {
		return err
	}
	if !e.Source.Valid() {
		return fieldErr(f("source"), "%q, want vm, kubernetes or static", e.Source)
	}
	return nil
}

func validateMetadata(field string, md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return fieldErr(field, "%d keys, at most %d", len(md), MaxMetadataKeys)
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(md)) {
		v := md[k]
		if k == "" || len(k) > MaxMetadataKeyLen {
			return fieldErr(field, "key %.70q must be 1..%d characters", k, MaxMetadataKeyLen)
		}
		for _, r := range k {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/') {
				return fieldErr(field, "key %q: character %q not allowed (letters, digits, - _ . /)", k, r)
			}
		}
		if len(v) > MaxMetadataValLen {
			return fieldErr(field+"["+k+"]", "value is %d bytes, at most %d", len(v), MaxMetadataValLen)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fieldErr(field, "%d bytes in all, at most %d", total, MaxMetadataBytes)
	}
	return nil
}

// ValidateLabel checks one DNS label: 1..63 characters of a-z, 0-9 and '-',
// not starting or ending with '-'. Upper case is rejected here; Normalize
// lower-cases the names it owns. It is names.ValidateLabel.
func ValidateLabel(field, l string) error { return names.ValidateLabel(field, l) }

// NormalizeService lower-cases a service name and strips one trailing dot.
// It is names.NormalizeService.
func NormalizeService(name string) string { return names.NormalizeService(name) }

// ValidateService checks a service name: one or more DNS labels joined by
// dots (e.g. "payments" or "payments.prod"), at most 253 characters. It is
// names.ValidateService.
func ValidateService(field, name string) error { return names.ValidateService(field, name) }

// DefaultEndpointID derives a stable, DNS-label-safe id from an address and
// port: 10.0.0.7:8080 gives "10-0-0-7-8080", 2001:db8::1 gives
// "2001-db8--1-8080".
func DefaultEndpointID(addr netip.Addr, port uint16) string {
	s := strings.NewReplacer(".", "-", ":", "-").Replace(addr.Unmap().String())
	s = strings.Trim(s, "-")
	return fmt.Sprintf("%s-%d", s, port)
}
