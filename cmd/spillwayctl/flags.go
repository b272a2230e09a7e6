package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// parsePort parses the value of --port, NAME=PORT[/PROTO]: "grpc=8080",
// "dns=53/udp". PROTO is tcp (the default) or udp, in any case. The name is
// checked by the server, which knows the rules for DNS labels.
func parsePort(s string) (*registryv1.Port, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return nil, fmt.Errorf("--port %q: want NAME=PORT[/PROTO], e.g. grpc=8080 or dns=53/udp", s)
	}
	if name == "" {
		return nil, fmt.Errorf("--port %q: the port name before '=' is empty", s)
	}
	num, proto, hasProto := strings.Cut(rest, "/")
	if num == "" {
		return nil, fmt.Errorf("--port %q: the port number after '=' is empty", s)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return nil, fmt.Errorf("--port %q: port %s out of range, want 1..65535", s, num)
		}
		return nil, fmt.Errorf("--port %q: port %q is not a number", s, num)
	}
	if n < 1 || n > 65535 {
		return nil, fmt.Errorf("--port %q: port %d out of range, want 1..65535", s, n)
	}
	p := &registryv1.Port{Name: name, Number: uint32(n), Protocol: "tcp"}
	if hasProto {
		switch strings.ToLower(proto) {
		case "tcp", "udp":
			p.Protocol = strings.ToLower(proto)
		default:
			return nil, fmt.Errorf("--port %q: protocol %q, want tcp or udp", s, proto)
		}
	}
	return p, nil
}

// parseMeta parses the value of --meta, KEY=VALUE. The value may be empty
// and may contain '='; the server checks the key's characters and sizes.
func parseMeta(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("--meta %q: want KEY=VALUE, e.g. version=1.2.3", s)
	}
	if key == "" {
		return "", "", fmt.Errorf("--meta %q: the key before '=' is empty", s)
	}
	return key, value, nil
}

// parseWeight parses the value of --weight: 1..65535.
func parseWeight(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("--weight %q: want a whole number 1..65535 (omit it for the server default, 100)", s)
	}
	return uint32(n), nil
}

// endpointFlags are the flags register and agent share.
type endpointFlags struct {
	service, address      string
	zone, region, subZone string
	id, health, weight    string
	ttl                   time.Duration
	ports, meta           stringList
}

func (f *endpointFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.service, "service", "", "service `name` to register under (required)")
	fs.StringVar(&f.address, "address", "", "endpoint `IP` address, IPv4 or IPv6 (required)")
	fs.Var(&f.ports, "port", "`NAME=PORT[/PROTO]`, PROTO tcp (default) or udp; repeat for more ports (at least one)")
	fs.StringVar(&f.zone, "zone", "", "`zone` of the endpoint, e.g. eu-west1-b (required)")
	fs.StringVar(&f.region, "region", "", "`region` of the endpoint")
	fs.StringVar(&f.subZone, "sub-zone", "", "`sub-zone` of the endpoint")
	fs.StringVar(&f.id, "id", "", "endpoint `id`, a DNS label (default <address>-<first port>)")
	fs.StringVar(&f.weight, "weight", "", "relative weight `N`, 1..65535 (default 100)")
	fs.StringVar(&f.health, "health", "", "`health`: healthy (default), draining or unhealthy")
	fs.DurationVar(&f.ttl, "ttl", 0, "lease TTL, whole seconds (default: the server's, 30s)")
	fs.Var(&f.meta, "meta", "metadata `KEY=VALUE`; repeat for more keys")
}

// request builds the RegisterRequest. Errors are usage errors naming the
// flag; the server validates the content (address, names, health).
func (f *endpointFlags) request() (*registryv1.RegisterRequest, error) {
	for _, r := range []struct{ flag, v string }{
		{"--service", f.service},
		{"--address", f.address},
		{"--zone", f.zone},
	} {
		if r.v == "" {
			return nil, usagef("%s is required", r.flag)
		}
	}
	if len(f.ports) == 0 {
		return nil, usagef("--port is required, e.g. --port grpc=8080")
	}
	ttl, err := ttlSeconds(f.ttl)
	if err != nil {
		return nil, err
	}
	ep := &registryv1.Endpoint{
		Id:       f.id,
		Address:  f.address,
		Locality: &registryv1.Locality{Region: f.region, Zone: f.zone, SubZone: f.subZone},
		Health:   f.health,
	}
	for _, s := range f.ports {
		p, err := parsePort(s)
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		ep.Ports = append(ep.Ports, p)
	}
	if f.weight != "" {
		if ep.Weight, err = parseWeight(f.weight); err != nil {
			return nil, &usageError{msg: err.Error()}
		}
	}
	for _, s := range f.meta {
		k, v, err := parseMeta(s)
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		if ep.Metadata == nil {
			ep.Metadata = map[string]string{}
		}
		if _, dup := ep.Metadata[k]; dup {
			return nil, usagef("--meta %q: key %q given twice", s, k)
		}
		ep.Metadata[k] = v
	}
	return &registryv1.RegisterRequest{Service: f.service, Endpoint: ep, TtlSeconds: ttl}, nil
}

// ttlSeconds checks --ttl: zero (the server default) or whole seconds.
func ttlSeconds(d time.Duration) (uint32, error) {
	switch {
	case d < 0:
		return 0, usagef("--ttl %v: must not be negative", d)
	case d%time.Second != 0:
		return 0, usagef("--ttl %v: must be whole seconds, e.g. 30s", d)
	case d/time.Second > 1<<32-1:
		return 0, usagef("--ttl %v: too long", d)
	}
	return uint32(d / time.Second), nil
}
