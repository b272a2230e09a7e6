package xds

import (
	"slices"
	"strconv"
	"time"

	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/spillway/spillway/registry"
)

// sotwType is a state-of-the-world stream's state for one resource type.
type sotwType struct {
	subs
	nonce string // last sent
	// sent is the last version sent and nacked the last one the client
	// rejected, as the hashes their version strings print (valid with
	// hasSent, hasNacked): a resync that finds nothing new compares
	// numbers and allocates no string.
	sent, nacked       uint64
	hasSent, hasNacked bool
}

// version is the version_info of the last response sent, "" before one.
func (ts *sotwType) version() string {
	if !ts.hasSent {
		return ""
	}
	return strconv.FormatUint(ts.sent, 16)
}

// sotwStream is a state-of-the-world stream's state, touched only under
// the stream lock (streamCore.mu).
type sotwStream struct {
	adsStream
	s      *Server
	stream grpc.ServerStream
	types  [4]sotwType
	nonce  uint64
	one    [1]string    // respond's list of one name
	oneRes [1]*resource // and its resource; cleared after each use
}

// StreamAggregatedResources implements state-of-the-world ADS. The
// handler's goroutine receives and answers requests; pushes for store
// changes run on a goroutine that exists only while they are pending.
func (s *Server) StreamAggregatedResources(stream v3discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	st := &sotwStream{s: s, stream: stream}
	return serveADS(s, &st.adsStream, protocolSotW, stream, st.push, st.handle)
}

// handle takes one request in. A request that answers an older response
// than the last one sent is ignored; a NACK is recorded; a subscription
// that changed is answered on the fan-out (the ACK or NACK of an
// unchanged one is not).
func (st *sotwStream) handle(req *v3discoverypb.DiscoveryRequest) error {
	t, err := st.admit(st.s, st.stream.Context(), protocolSotW, req)
	if t < 0 {
		return err
	}
	ts := &st.types[t]
	// A nonce is stale only once this stream has sent the type a newer
	// one: a reconnecting client may carry its old stream's nonce.
	if n := req.GetResponseNonce(); n != "" && ts.nonce != "" && n != ts.nonce {
		st.s.metrics.stale.WithLabelValues(shortType(typeURLs[t])).Inc()
		return nil // answers an older response; a newer one is on its way
	}
	if d := req.GetErrorDetail(); d != nil {
		ts.nacked, ts.hasNacked = ts.sent, ts.hasSent
		st.s.nack(t, ts.names, st.node, ts.version(), d.GetMessage())
	}
	if rn := req.GetResourceNames(); ts.requested && !ts.wildcard && len(rn) == 1 && len(ts.names) == 1 && rn[0] != "*" {
		if _, ok := ts.names[rn[0]]; ok {
			return nil // the usual ACK (or NACK) of one name, decided without a map
		}
	}
	var names map[string]struct{}
	star := false
	if rn := req.GetResourceNames(); len(rn) == 1 && rn[0] != "*" && st.s.known(rn[0]) {
		// The usual grpc-go request: one service. The set is the one
		// every such stream shares (never modified), not a map per type
		// per stream.
		names = st.s.cache.entry(rn[0]).one
	} else {
		names = make(map[string]struct{}, len(rn))
		for _, n := range rn {
			names[n] = struct{}{}
		}
		_, star = names["*"]
		delete(names, "*")
	}
	wildcard := star || (len(names) == 0 && (t == 0 || t == 2) && (!ts.requested || ts.wildcard))
	if ts.requested && wildcard == ts.wildcard && sameSet(names, ts.names) {
		return nil // an ACK or a NACK: nothing new to send
	}
	ts.requested, ts.names, ts.wildcard = true, names, wildcard
	st.updateInterest()
	// The answer goes out on a fan-out worker, in turn with pushes: the
	// handler's goroutine, which every stream keeps, stays small.
	st.w.ask(t)
	return nil
}

// known reports whether name is a service in the registry.
func (s *Server) known(name string) bool {
	_, ok := s.store.Snapshot().Service(name)
	return ok
}

func sameSet(a, b map[string]struct{}) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func (st *sotwStream) subsOf() [4]*subs {
	return [4]*subs{&st.types[0].subs, &st.types[1].subs, &st.types[2].subs, &st.types[3].subs}
}

// updateInterest tells the hub the union of the stream's names. A
// state-of-the-world stream never modifies a names set once it holds it
// (a request replaces it), so when every type names the same set, as a
// grpc-go stream's four types do, the hub holds that set too instead of a
// union of its own.
func (st *sotwStream) updateInterest() {
	var one map[string]struct{}
	for i := range st.types {
		ts := &st.types[i]
		if ts.wildcard {
			one = nil
			break
		}
		if len(ts.names) == 0 {
			continue
		}
		if one != nil && !sameSet(one, ts.names) {
			one = nil
			break
		}
		one = ts.names
	}
	if one != nil {
		st.s.hub.setNames(st.w, one, false, st.node)
		return
	}
	st.s.hub.setInterest(st.w, st.subsOf(), st.node)
}

// push handles the changes the hub marked.
func (st *sotwStream) push() error { return pushTypes(st.w, st.subsOf(), st.respond) }

// respond sends type t's subscribed resources, unless they are what was
// last sent or what the client last rejected.
func (st *sotwStream) respond(t int, since time.Time) error {
	s, ts := st.s, &st.types[t]
	snap := s.store.Snapshot()
	var names []string
	switch {
	case ts.wildcard:
		names = snap.Services()
	case len(ts.names) == 1: // the usual grpc-go stream: one service
		for n := range ts.names {
			st.one[0] = n
		}
		names = st.one[:]
	default:
		names = make([]string, 0, len(ts.names))
		for n := range ts.names {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	var res []*resource
	if len(names) == 1 {
		res = st.oneRes[:0]
		defer clear(st.oneRes[:]) // a stream holds no resource between pushes
	} else {
		res = make([]*resource, 0, len(names))
	}
	h := fnvOffset
	for _, n := range names {
		h = fnvString(h, n)
		h = fnvByte(h, 0)
		if r, _ := s.lookupFor(t, n, st.node, st.w, snap); r != nil {
			res = append(res, r)
			h = fnvString(h, r.version)
		}
		h = fnvByte(h, 1)
	}
	if ts.hasSent && h == ts.sent || ts.hasNacked && h == ts.nacked {
		s.metrics.suppressedBy[t].Inc()
		return nil
	}
	version := strconv.FormatUint(h, 16)
	st.nonce++
	nonce := strconv.FormatUint(st.nonce, 10)
	if err := st.stream.SendMsg(newRawResponse(version, typeURLs[t], nonce, res)); err != nil {
		return err
	}
	ts.sent, ts.hasSent, ts.nonce = h, true, nonce
	s.metrics.pushesBy[t].Inc()
	if !since.IsZero() {
		s.metrics.pushLatency.Observe(time.Since(since).Seconds())
	}
	return nil
}

// nack records a client's rejection: a log line with its reason and a
// count per type and service.
func (s *Server) nack(t int, names map[string]struct{}, node nodeInfo, version, detail string) {
	typ := shortType(typeURLs[t])
	if len(names) == 0 {
		s.metrics.nacks.WithLabelValues(typ, "*").Inc()
	}
	for n := range names {
		if _, ok := s.store.Snapshot().Service(n); ok {
			s.metrics.nacks.WithLabelValues(typ, n).Inc()
		} else {
			s.metrics.nacks.WithLabelValues(typ, "unknown").Inc()
		}
	}
	s.log.Warn("client rejected a response (NACK)", "type", typ, "node", node.id, "zone", node.zone,
		"version", version, "error_detail", detail)
}

// zoneLabel bounds the zone label of metrics to valid zone names.
func zoneLabel(z string) string {
	if z == "" {
		return "none"
	}
	if registry.ValidateLabel("zone", z) != nil {
		return "invalid"
	}
	return z
}
