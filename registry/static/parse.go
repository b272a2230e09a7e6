package static

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/internal/strictyaml"
	"github.com/spillway/spillway/registry"
)

// file is a parsed, validated static file.
type file struct {
	services []service
}

// service is one entry of the file's services list. Its endpoints are
// normalised and validated, owned by registry.SourceStatic, with zero
// Registered and LastSeen times.
type service struct {
	name      string
	endpoints []*registry.Endpoint
	lines     []int // lines[i] is the line endpoints[i] starts on
}

// lineError places an error at a line of the file. It unwraps to the error
// it places, so errors.Is(err, registry.ErrInvalid) and
// errors.As(err, **registry.FieldError) see through it.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// syntaxError is a file that is not well-formed YAML (or not one YAML
// document). Like registry.FieldError it wraps registry.ErrInvalid.
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }
func (e *syntaxError) Unwrap() error { return registry.ErrInvalid }

// parser walks the YAML node tree by hand, rather than decoding into
// structs, so that every error names the field by its path in the file
// ("services[0].endpoints[2].address") and by its line: yaml.v3's own
// unmarshal errors carry only a line.
type parser struct {
	// lines maps each field path seen so far to the line it is on, to place
	// the validation errors that registry reports by field name.
	lines map[string]int
}

// parse reads a static file. Any error is a *lineError or *syntaxError
// wrapping registry.ErrInvalid.
func parse(data []byte) (*file, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			// An empty file is far more often a half-written file than a
			// wish to delete every static endpoint.
			return nil, &syntaxError{"empty file: write \"services: []\" to declare no services"}
		}
		return nil, &syntaxError{"malformed YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, &syntaxError{"malformed YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		return nil, &lineError{extra.Line, &syntaxError{"more than one YAML document; the file holds one"}}
	}
	p := &parser{lines: map[string]int{}}
	f, err := p.file(&doc)
	if err != nil {
		return nil, p.place(err)
	}
	return f, nil
}

// place attaches a line to a *registry.FieldError from the field's path, or
// from its closest parent's.
func (p *parser) place(err error) error {
	var le *lineError
	if errors.As(err, &le) {
		return err
	}
	var fe *registry.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	for path := fe.Field; path != ""; path = parent(path) {
		if line, ok := p.lines[path]; ok {
			return &lineError{line, err}
		}
	}
	return err
}

// parent strips the last element of a field path: "a[0].b" → "a[0]" → "a".
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func fieldErr(field, format string, args ...any) error {
	return &registry.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// at returns err placed at n's line.
func at(n *yaml.Node, err error) error { return &lineError{n.Line, err} }

func (p *parser) file(doc *yaml.Node) (*file, error) {
	root := doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) != 1 {
			return nil, at(root, &syntaxError{"want one YAML document"})
		}
		root = root.Content[0]
	}
	f := &file{}
	fields, err := p.mapping(root, "", "services")
	if err != nil {
		return nil, err
	}
	svcs := fields["services"]
	if svcs == nil || strictyaml.IsNull(svcs) {
		return f, nil
	}
	items, err := p.sequence(svcs, "services")
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for i, n := range items {
		path := fmt.Sprintf("services[%d]", i)
		svc, err := p.service(n, path)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[svc.name]; dup {
			return nil, fieldErr(path+".name", "service %q is already listed as services[%d]", svc.name, j)
		}
		seen[svc.name] = i
		f.services = append(f.services, svc)
	}
	return f, nil
}

func (p *parser) service(n *yaml.Node, path string) (service, error) {
	fields, err := p.mapping(n, path, "name", "endpoints")
	if err != nil {
		return service{}, err
	}
	var svc service
	if fields["name"] == nil {
		return service{}, at(n, fieldErr(path+".name", "is required"))
	}
	name, err := p.str(fields["name"], path+".name")
	if err != nil {
		return service{}, err
	}
	svc.name = registry.NormalizeService(name)
	if err := registry.ValidateService(path+".name", svc.name); err != nil {
		return service{}, err
	}
	eps := fields["endpoints"]
	if eps == nil || strictyaml.IsNull(eps) {
		return svc, nil
	}
	items, err := p.sequence(eps, path+".endpoints")
	if err != nil {
		return service{}, err
	}
	seen := map[string]int{}
	for i, n := range items {
		epath := fmt.Sprintf("%s.endpoints[%d]", path, i)
		e, err := p.endpoint(n, epath)
		if err != nil {
			return service{}, err
		}
		if j, dup := seen[e.ID]; dup {
			return service{}, fieldErr(epath+".id", "endpoint id %q is already used by %s.endpoints[%d] (the default id is address-firstport)", e.ID, path, j)
		}
		seen[e.ID] = i
		svc.endpoints = append(svc.endpoints, e)
		svc.lines = append(svc.lines, n.Line)
	}
	return svc, nil
}

var endpointFields = []string{"id", "address", "ports", "zone", "region", "sub_zone", "health", "weight", "metadata"}

func (p *parser) endpoint(n *yaml.Node, path string) (*registry.Endpoint, error) {
	fields, err := p.mapping(n, path, endpointFields...)
	if err != nil {
		return nil, err
	}
	e := &registry.Endpoint{Source: registry.SourceStatic}
	strs := map[string]*string{
		"id":       &e.ID,
		"zone":     &e.Locality.Zone,
		"region":   &e.Locality.Region,
		"sub_zone": &e.Locality.SubZone,
		"health":   (*string)(&e.Health),
	}
	for _, k := range slices.Sorted(maps.Keys(strs)) {
		if v := fields[k]; v != nil {
			if *strs[k], err = p.str(v, path+"."+k); err != nil {
				return nil, err
			}
		}
	}

	if fields["address"] == nil {
		return nil, at(n, fieldErr(path+".address", "is required"))
	}
	addr, err := p.str(fields["address"], path+".address")
	if err != nil {
		return nil, err
	}
	if e.Address, err = netip.ParseAddr(addr); err != nil {
		return nil, fieldErr(path+".address", "%q is not an IP address", addr)
	}
	if e.Address.Zone() != "" {
		return nil, fieldErr(path+".address", "%q must not carry an IPv6 zone", addr)
	}

	if v := fields["ports"]; v != nil && !strictyaml.IsNull(v) {
		items, err := p.sequence(v, path+".ports")
		if err != nil {
			return nil, err
		}
		for i, pn := range items {
			port, err := p.port(pn, fmt.Sprintf("%s.ports[%d]", path, i))
			if err != nil {
				return nil, err
			}
			e.Ports = append(e.Ports, port)
		}
	}
	if len(e.Ports) == 0 {
		return nil, at(n, fieldErr(path+".ports", "at least one port is required"))
	}

	if v := fields["weight"]; v != nil {
		w, err := p.uint(v, path+".weight", registry.MaxWeight)
		if err != nil {
			return nil, err
		}
		if w == 0 {
			return nil, fieldErr(path+".weight", "0, want 1..%d (leave it out for %d; use health: draining to stop traffic)", registry.MaxWeight, registry.DefaultWeight)
		}
		e.Weight = uint32(w)
	}

	if v := fields["metadata"]; v != nil && !strictyaml.IsNull(v) {
		md, err := p.metadata(v, path+".metadata")
		if err != nil {
			return nil, err
		}
		e.Metadata = md
	}

	e.Normalize()
	if e.ID == "" {
		e.ID = registry.DefaultEndpointID(e.Address, e.Ports[0].Number)
	}
	if err := e.Validate(path); err != nil {
		// registry names locality fields "locality.zone"; the file has
		// them flat on the endpoint.
		var fe *registry.FieldError
		if errors.As(err, &fe) {
			fe.Field = strings.Replace(fe.Field, path+".locality.", path+".", 1)
		}
		return nil, err
	}
	return e, nil
}

var portFields = []string{"name", "number", "protocol"}

// port reads a port as a mapping {name, number, protocol} or as the
// shorthand "name=number[/protocol]".
func (p *parser) port(n *yaml.Node, path string) (registry.Port, error) {
	if n.Kind == yaml.ScalarNode {
		p.lines[path] = n.Line
		port, ok := parsePortShorthand(n.Value)
		if !ok {
			return registry.Port{}, fieldErr(path, "%q is not name=number[/protocol], e.g. \"grpc=8080/tcp\"", n.Value)
		}
		return port, nil
	}
	fields, err := p.mapping(n, path, portFields...)
	if err != nil {
		return registry.Port{}, err
	}
	var port registry.Port
	if v := fields["name"]; v != nil {
		if port.Name, err = p.str(v, path+".name"); err != nil {
			return registry.Port{}, err
		}
	}
	if v := fields["protocol"]; v != nil {
		proto, err := p.str(v, path+".protocol")
		if err != nil {
			return registry.Port{}, err
		}
		port.Protocol = registry.Protocol(proto)
	}
	if fields["number"] == nil {
		return registry.Port{}, at(n, fieldErr(path+".number", "is required"))
	}
	num, err := p.uint(fields["number"], path+".number", 65535)
	if err != nil {
		return registry.Port{}, err
	}
	port.Number = uint16(num)
	return port, nil
}

// parsePortShorthand parses "name=number[/protocol]". Validation of the
// parts is left to registry.Endpoint.Validate.
func parsePortShorthand(s string) (registry.Port, bool) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return registry.Port{}, false
	}
	num, proto, _ := strings.Cut(rest, "/")
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil {
		return registry.Port{}, false
	}
	return registry.Port{Name: name, Number: uint16(n), Protocol: registry.Protocol(proto)}, true
}

func (p *parser) metadata(n *yaml.Node, path string) (map[string]string, error) {
	if n.Kind != yaml.MappingNode {
		return nil, at(n, fieldErr(path, "want a mapping of key: value, got %s", strictyaml.Describe(n)))
	}
	md := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, at(k, fieldErr(path, "key: want a string, got %s", strictyaml.Describe(k)))
		}
		if _, dup := md[k.Value]; dup {
			return nil, at(k, fieldErr(path, "key %q is listed twice", k.Value))
		}
		p.lines[path+"["+k.Value+"]"] = k.Line
		val, err := p.str(v, path+"["+k.Value+"]")
		if err != nil {
			return nil, err
		}
		md[k.Value] = val
	}
	return md, nil
}

// mapping checks that n is a mapping whose keys are all in known and none
// repeats, records the line of each field, and returns the value nodes by key.
func (p *parser) mapping(n *yaml.Node, path string, known ...string) (map[string]*yaml.Node, error) {
	if path != "" {
		p.lines[path] = n.Line
	}
	if err := noAlias(n, path); err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		where := path
		if where == "" {
			where = "file"
		}
		return nil, at(n, fieldErr(where, "want a mapping with fields %s, got %s", strings.Join(known, ", "), strictyaml.Describe(n)))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, at(k, fieldErr(orFile(path), "want a field name, got %s", strictyaml.Describe(k)))
		}
		fpath := k.Value
		if path != "" {
			fpath = path + "." + k.Value
		}
		if !slices.Contains(known, k.Value) {
			return nil, at(k, fieldErr(fpath, "unknown field (want one of %s)", strings.Join(known, ", ")))
		}
		if _, dup := out[k.Value]; dup {
			return nil, at(k, fieldErr(fpath, "field is listed twice"))
		}
		p.lines[fpath] = k.Line
		out[k.Value] = v
	}
	return out, nil
}

func orFile(path string) string {
	if path == "" {
		return "file"
	}
	return path
}

func (p *parser) sequence(n *yaml.Node, path string) ([]*yaml.Node, error) {
	if err := noAlias(n, path); err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, at(n, fieldErr(path, "want a list, got %s", strictyaml.Describe(n)))
	}
	return n.Content, nil
}

// str reads a scalar as text; YAML null is "". Numbers keep their text, so
// "id: 1" is the id "1".
func (p *parser) str(n *yaml.Node, path string) (string, error) {
	if err := noAlias(n, path); err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode {
		return "", at(n, fieldErr(path, "want a string, got %s", strictyaml.Describe(n)))
	}
	if strictyaml.IsNull(n) {
		return "", nil
	}
	return n.Value, nil
}

// uint reads an integer in 0..max.
func (p *parser) uint(n *yaml.Node, path string, max uint64) (uint64, error) {
	if err := noAlias(n, path); err != nil {
		return 0, err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, at(n, fieldErr(path, "%s, want a whole number 0..%d", strictyaml.Describe(n), max))
	}
	var v int64
	if err := n.Decode(&v); err != nil || v < 0 || uint64(v) > max {
		return 0, at(n, fieldErr(path, "%s, want a whole number 0..%d", strictyaml.Describe(n), max))
	}
	return uint64(v), nil
}

// noAlias rejects YAML aliases: following them by hand could expand a
// small file exponentially.
func noAlias(n *yaml.Node, path string) error {
	if n.Kind == yaml.AliasNode {
		return at(n, fieldErr(orFile(path), "YAML aliases (*%s) are not supported", n.Value))
	}
	return nil
}
