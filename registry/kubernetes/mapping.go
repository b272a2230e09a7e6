package kubernetes

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unique"
	"weak"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/spillway/spillway/registry"
)

// byService indexes slices by "<namespace>/<service>".
const byService = "service"

// Node labels the locality comes from.
const (
	labelZone   = corev1.LabelTopologyZone   // topology.kubernetes.io/zone
	labelRegion = corev1.LabelTopologyRegion // topology.kubernetes.io/region
)

// slimSlice is the informers' transform: it keeps only what the mapping
// reads, so the cache holds a fraction of each EndpointSlice. An
// endpoint's pod name (targetRef) takes the place of its hostname: both
// only serve to derive the id, and the pod name wins. It never modifies
// its input, and slimming a slim slice gives an equal one.
//
// sel is the configured label selector, which the API server applies;
// a slice that does not match it (as a fake API server may send) loses its
// service label and so maps to nothing.
func slimSlice(sel labels.Selector, in *interner) func(any) (any, error) {
	return func(obj any) (any, error) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return obj, nil
		}
		out := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:            s.Name,
				Namespace:       s.Namespace,
				ResourceVersion: s.ResourceVersion,
			},
			AddressType: s.AddressType,
		}
		if len(s.Ports) > 0 {
			out.Ports = make([]discoveryv1.EndpointPort, len(s.Ports))
			for i, p := range s.Ports {
				out.Ports[i] = discoveryv1.EndpointPort{Name: p.Name, Protocol: p.Protocol, Port: p.Port}
			}
		}
		if svc, ok := s.Labels[discoveryv1.LabelServiceName]; ok && sel.Matches(labels.Set(s.Labels)) {
			out.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
		}
		if len(s.Endpoints) > 0 {
			out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
		}
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			o := &out.Endpoints[i]
			if len(e.Addresses) > 0 {
				o.Addresses = []string{e.Addresses[0]}
			}
			o.Conditions = discoveryv1.EndpointConditions{
				Ready:       internBool(e.Conditions.Ready),
				Serving:     internBool(e.Conditions.Serving),
				Terminating: internBool(e.Conditions.Terminating),
			}
			o.Hostname = e.Hostname
			if r := e.TargetRef; r != nil && r.Kind == "Pod" && r.Name != "" {
				name := r.Name // not &r.Name, which would keep r alive
				o.Hostname = &name
			}
			o.NodeName = in.intern(e.NodeName)
			o.Zone = in.intern(e.Zone)
		}
		return out, nil
	}
}

// slimNode is the node informer's transform: name and locality labels.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
	for _, k := range []string{labelZone, labelRegion} {
		if v, ok := n.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = make(map[string]string, 2)
			}
			out.Labels[k] = unique.Make(v).Value()
		}
	}
	return out, nil
}

var boolVals = [2]bool{false, true}

// internBool returns a shared pointer with *p's value: the cache then holds
// no allocation per condition. The pointee must never be written.
func internBool(p *bool) *bool {
	if p == nil {
		return nil
	}
	if *p {
		return &boolVals[1]
	}
	return &boolVals[0]
}

// interner gives equal node and zone names one shared pointer, so the
// cache holds no allocation per endpoint for them. Pointees must never be
// written. Entries are weak: names no cached slice uses any more (nodes
// replaced by autoscaling) are swept, so it stays as big as what is live.
type interner struct {
	mu    sync.Mutex
	m     map[string]weak.Pointer[string]
	added int // since the last sweep
	live  int // len(m) after the last sweep
}

func (in *interner) intern(p *string) *string {
	if p == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if w, ok := in.m[*p]; ok {
		if v := w.Value(); v != nil {
			return v
		}
	}
	if in.m == nil {
		in.m = map[string]weak.Pointer[string]{}
	}
	v := new(string)
	*v = *p
	in.m[*v] = weak.Make(v)
	// Sweep when the map may have doubled: amortised O(1) per add.
	if in.added++; in.added > max(1024, in.live) {
		for k, w := range in.m {
			if w.Value() == nil {
				delete(in.m, k)
			}
		}
		in.added, in.live = 0, len(in.m)
	}
	return v
}

// sameSlice reports whether two slim slices carry the same content,
// ignoring the resource version.
func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && a.AddressType == b.AddressType &&
		a.Labels[discoveryv1.LabelServiceName] == b.Labels[discoveryv1.LabelServiceName] &&
		len(a.Labels) == len(b.Labels) &&
		reflect.DeepEqual(a.Ports, b.Ports) && reflect.DeepEqual(a.Endpoints, b.Endpoints)
}

// sameLocality reports whether two slim nodes have the same locality labels.
func sameLocality(a, b *corev1.Node) bool {
	return a.Labels[labelZone] == b.Labels[labelZone] && a.Labels[labelRegion] == b.Labels[labelRegion]
}

// serviceKey is "<namespace>/<service>" of a slim slice, or "" if it
// belongs to no Service.
func serviceKey(s *discoveryv1.EndpointSlice) string {
	svc := s.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return ""
	}
	return s.Namespace + "/" + svc
}

func indexByService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	if k := serviceKey(s); k != "" {
		return []string{k}, nil
	}
	return nil, nil
}

// slicesOnNodes returns the Service keys of the slices with an endpoint
// on one of nodes. Node locality changes are rare, so a scan of the cache
// replaces an index that would cost memory per endpoint.
func slicesOnNodes(objs []any, nodes map[string]struct{}, keys map[string]struct{}) {
	for _, obj := range objs {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		k := serviceKey(s)
		if k == "" {
			continue
		}
		for i := range s.Endpoints {
			if n := s.Endpoints[i].NodeName; n != nil {
				if _, ok := nodes[*n]; ok {
					keys[k] = struct{}{}
					break
				}
			}
		}
	}
}

// health maps an endpoint's conditions; ok is false for an endpoint that
// must not be in the registry. Nil ready means true, nil serving means
// ready (the API server sets both since 1.22), nil terminating false.
func health(c discoveryv1.EndpointConditions) (h registry.Health, ok bool) {
	ready := c.Ready == nil || *c.Ready
	serving := ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case terminating && serving:
		return registry.Draining, true
	case !terminating && ready:
		return registry.Healthy, true
	}
	return "", false
}

// rank orders healthy before draining, for the merge of duplicates.
func rank(h registry.Health) int {
	if h == registry.Healthy {
		return 0
	}
	return 1
}

// mapper turns the slices of one Kubernetes Service in one cluster into
// registry endpoints.
type mapper struct {
	// cluster ends every id, or "" when only one cluster is watched.
	cluster     string
	unnamedPort string
	// node returns a node's slim object, or nil.
	node func(name string) *corev1.Node
}

// skip counts the endpoints a mapping could not use, by reason.
type skip struct {
	badAddress, noPorts, collision int
}

func (s skip) total() int { return s.badAddress + s.noPorts + s.collision }

// endpoints maps the slices of one Service: the union of their endpoints
// that are healthy or draining, sorted by id, normalised and valid, owned
// by registry.SourceKubernetes with zero times.
func (m *mapper) endpoints(slcs []*discoveryv1.EndpointSlice) ([]*registry.Endpoint, skip) {
	var sk skip
	slcs = slices.Clone(slcs)
	slices.SortFunc(slcs, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	byID := map[string]*registry.Endpoint{}
	for _, s := range slcs {
		var v6 bool
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
		case discoveryv1.AddressTypeIPv6:
			v6 = true
		default: // FQDN: no address to serve
			continue
		}
		ports := m.ports(s.Ports)
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			h, ok := health(ep.Conditions)
			if !ok {
				continue
			}
			if len(ports) == 0 {
				sk.noPorts++
				continue
			}
			var addr netip.Addr
			if len(ep.Addresses) > 0 {
				addr, _ = netip.ParseAddr(ep.Addresses[0])
			}
			if !addr.IsValid() || addr.Is4() == v6 || addr.Is4In6() || addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast() {
				sk.badAddress++
				continue
			}
			e := &registry.Endpoint{
				ID:       m.id(ep, addr, ports, v6),
				Address:  addr,
				Ports:    ports,
				Locality: m.locality(ep),
				Health:   h,
				Weight:   registry.DefaultWeight,
				Source:   registry.SourceKubernetes,
			}
			if old, dup := byID[e.ID]; dup {
				if old.Address == e.Address {
					// The same endpoint in two slices, as while the slice
					// controller moves it: one endpoint, the better state,
					// every port.
					byID[e.ID] = mergeDup(old, e)
					continue
				}
				e.ID = m.addressID(addr, ports)
				if _, dup := byID[e.ID]; dup {
					sk.collision++
					continue
				}
			}
			if e.Validate("") != nil {
				sk.badAddress++ // the only field not checked above
				continue
			}
			byID[e.ID] = e
		}
	}
	out := make([]*registry.Endpoint, 0, len(byID))
	for _, e := range byID {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *registry.Endpoint) int { return cmp.Compare(a.ID, b.ID) })
	return out, sk
}

// mergeDup merges two sightings of one endpoint (same id and address).
func mergeDup(a, b *registry.Endpoint) *registry.Endpoint {
	best := a
	if rank(b.Health) < rank(a.Health) {
		best = b
	}
	out := *best
	out.Ports = slices.Clone(a.Ports)
	for _, p := range b.Ports {
		if !slices.ContainsFunc(out.Ports, func(q registry.Port) bool { return q.Name == p.Name }) {
			out.Ports = append(out.Ports, p)
		}
	}
	slices.SortFunc(out.Ports, func(x, y registry.Port) int { return cmp.Compare(x.Name, y.Name) })
	if len(out.Ports) > registry.MaxPorts {
		out.Ports = out.Ports[:registry.MaxPorts]
	}
	return &out
}

// ports maps a slice's ports, sorted by name. Ports without a number
// ("all ports"), SCTP ports and ports whose name is not a DNS label are
// left out.
func (m *mapper) ports(in []discoveryv1.EndpointPort) []registry.Port {
	out := make([]registry.Port, 0, len(in))
	for _, p := range in {
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			continue
		}
		proto := registry.TCP
		if p.Protocol != nil {
			switch *p.Protocol {
			case corev1.ProtocolTCP, "":
			case corev1.ProtocolUDP:
				proto = registry.UDP
			default:
				continue
			}
		}
		name := m.unnamedPort
		if p.Name != nil && *p.Name != "" {
			name = strings.ToLower(*p.Name)
		}
		if registry.ValidateLabel("", name) != nil ||
			slices.ContainsFunc(out, func(q registry.Port) bool { return q.Name == name }) {
			continue
		}
		out = append(out, registry.Port{Name: name, Number: uint16(*p.Port), Protocol: proto})
	}
	slices.SortFunc(out, func(x, y registry.Port) int { return cmp.Compare(x.Name, y.Name) })
	if len(out) > registry.MaxPorts {
		out = out[:registry.MaxPorts]
	}
	return out
}

// locality reads the zone from the endpoint, else from its node, and the
// region from its node. Values that are not DNS labels are left out.
func (m *mapper) locality(ep *discoveryv1.Endpoint) registry.Locality {
	var l registry.Locality
	if ep.Zone != nil {
		l.Zone = *ep.Zone
	}
	if ep.NodeName != nil && m.node != nil {
		if n := m.node(*ep.NodeName); n != nil {
			if l.Zone == "" {
				l.Zone = n.Labels[labelZone]
			}
			l.Region = n.Labels[labelRegion]
		}
	}
	l.Zone, l.Region = labelOrEmpty(l.Zone), labelOrEmpty(l.Region)
	return l
}

func labelOrEmpty(s string) string {
	if registry.ValidateLabel("", s) == nil {
		return s
	}
	if l := strings.ToLower(s); registry.ValidateLabel("", l) == nil {
		return l
	}
	return ""
}

// id derives an endpoint's id from its pod name (targetRef, or the
// hostname of a slim slice), else its hostname, else its address, with "-v6" for IPv6 and "-<cluster>" when several clusters
// are watched.
func (m *mapper) id(ep *discoveryv1.Endpoint, addr netip.Addr, ports []registry.Port, v6 bool) string {
	var base string
	if r := ep.TargetRef; r != nil && r.Kind == "Pod" {
		base = sanitizeLabel(r.Name)
	}
	if base == "" && ep.Hostname != nil {
		base = sanitizeLabel(*ep.Hostname)
	}
	if base == "" {
		return m.addressID(addr, ports)
	}
	suffix := ""
	if v6 {
		suffix = "-v6"
	}
	if m.cluster != "" {
		suffix += "-" + m.cluster
	}
	return fitLabel(base, suffix)
}

// addressID is the id of an endpoint without a usable name: the registry's
// default id (address and first port), then the cluster.
func (m *mapper) addressID(addr netip.Addr, ports []registry.Port) string {
	suffix := ""
	if m.cluster != "" {
		suffix = "-" + m.cluster
	}
	return fitLabel(registry.DefaultEndpointID(addr, ports[0].Number), suffix)
}

// sanitizeLabel lower-cases s and replaces what a DNS label cannot hold
// (dots of pod names, underscores) with '-'; "" if nothing is left.
func sanitizeLabel(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// fitLabel joins base and suffix into a DNS label of at most 63
// characters: a base too long is cut and followed by 8 hex digits of its
// hash, so distinct long names stay distinct.
func fitLabel(base, suffix string) string {
	if len(base)+len(suffix) <= registry.MaxLabelLen {
		return base + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(base))
	keep := registry.MaxLabelLen - len(suffix) - 9
	return fmt.Sprintf("%s-%08x%s", strings.TrimRight(base[:keep], "-"), h.Sum32(), suffix)
}
