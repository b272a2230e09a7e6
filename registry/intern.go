package registry

import (
	"strconv"
	"strings"
)

// A region's endpoints mostly repeat a few port lists ([grpc 8080 tcp])
// and a few locality names (three zones): the store keeps one copy of
// each, shared by every endpoint that has it, instead of one per
// endpoint (48 bytes of port list and 8-16 of zone name each). Endpoints
// in the store are immutable, so sharing is safe; Clone still gives a
// caller its own port list. The tables are bounded: past maxInterned
// distinct values an endpoint keeps its own copy.

// maxInterned bounds each intern table.
const maxInterned = 4096

// interner holds the shared values. The store's writer (under Store.mu)
// owns it.
type interner struct {
	ports map[string][]Port
	names map[string]string
	key   []byte // scratch for the ports key
}

// endpoint replaces e's port list and locality names by the shared
// copies, adding them while the tables have room. e is the store's own
// copy, normalised and valid.
func (in *interner) endpoint(e *Endpoint) {
	e.Ports = in.portList(e.Ports)
	e.Locality.Region = in.name(e.Locality.Region)
	e.Locality.Zone = in.name(e.Locality.Zone)
	e.Locality.SubZone = in.name(e.Locality.SubZone)
}

func (in *interner) portList(ps []Port) []Port {
	if len(ps) == 0 {
		return ps
	}
	k := in.key[:0]
	for _, p := range ps {
		k = append(k, p.Name...)
		k = append(k, 0)
		k = strconv.AppendUint(k, uint64(p.Number), 10)
		k = append(k, 0)
		k = append(k, p.Protocol...)
		k = append(k, 0)
	}
	in.key = k
	if shared, ok := in.ports[string(k)]; ok {
		return shared
	}
	if in.ports == nil {
		in.ports = map[string][]Port{}
	}
	if len(in.ports) >= maxInterned {
		return ps
	}
	// Its own copy, so that a kept name pins no larger buffer; full, so
	// that an append to the shared list copies.
	own := make([]Port, len(ps))
	for i, p := range ps {
		own[i] = Port{Name: strings.Clone(p.Name), Number: p.Number, Protocol: Protocol(strings.Clone(string(p.Protocol)))}
	}
	in.ports[string(k)] = own
	return own
}

func (in *interner) name(s string) string {
	if s == "" {
		return s
	}
	if shared, ok := in.names[s]; ok {
		return shared
	}
	if in.names == nil {
		in.names = map[string]string{}
	}
	if len(in.names) >= maxInterned {
		return s
	}
	own := strings.Clone(s) // pins no larger buffer
	in.names[own] = own
	return own
}
