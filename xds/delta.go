package xds

import (
	"slices"
	"strconv"
	"time"

	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// deltaType is a delta stream's state for one resource type.
type deltaType struct {
	subs // names are the explicit subscriptions
	// known is what the client holds: name -> version. A name mapped to ""
	// was told removed (or not existing) and is not told again.
	known map[string]string
	// sent and rejected: the versions of the last response, and those the
	// client NACKed, which are not sent again.
	sent     map[string]string
	rejected map[string]string
	nonce    string
}

type deltaStream struct {
	adsStream
	s      *Server
	stream v3discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	types  [4]deltaType
	nonce  uint64
}

// DeltaAggregatedResources implements incremental (delta) ADS, with the
// same goroutine structure as StreamAggregatedResources, but for the
// answers to requests, which the handler's goroutine sends.
func (s *Server) DeltaAggregatedResources(stream v3discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	st := &deltaStream{s: s, stream: stream}
	return serveADS(s, &st.adsStream, protocolDelta, stream, st.push, st.handle)
}

// handle takes one request in: its subscriptions and unsubscriptions per
// resource, and a NACK of the response it names; a request that changes
// what the stream subscribes to is answered at once.
func (st *deltaStream) handle(req *v3discoverypb.DeltaDiscoveryRequest) error {
	t, err := st.admit(st.s, st.stream.Context(), protocolDelta, req)
	if t < 0 {
		return err
	}
	ts := &st.types[t]
	first := !ts.requested
	if first {
		ts.requested = true
		ts.names, ts.known, ts.sent, ts.rejected = map[string]struct{}{}, map[string]string{}, map[string]string{}, map[string]string{}
		// A reconnecting client says what it already holds; what is
		// unchanged is not sent again.
		for n, v := range req.GetInitialResourceVersions() {
			ts.known[n] = v
		}
		// Legacy wildcard: a first LDS/CDS request naming nothing.
		if len(req.GetResourceNamesSubscribe()) == 0 && (t == 0 || t == 2) {
			ts.wildcard = true
		}
	}
	if n := req.GetResponseNonce(); n != "" && n == ts.nonce {
		if d := req.GetErrorDetail(); d != nil {
			for name, v := range ts.sent {
				ts.rejected[name] = v
			}
			st.s.nack(t, ts.names, st.node, "", d.GetMessage())
		}
	} else if n != "" {
		st.s.metrics.stale.WithLabelValues(shortType(typeURLs[t])).Inc()
	}
	changed := first
	for _, n := range req.GetResourceNamesSubscribe() {
		if n == "*" {
			changed = changed || !ts.wildcard
			ts.wildcard = true
			continue
		}
		if _, ok := ts.names[n]; !ok {
			ts.names[n] = struct{}{}
			changed = true
		}
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		if n == "*" {
			changed = changed || ts.wildcard
			ts.wildcard = false
			continue
		}
		if _, ok := ts.names[n]; ok {
			delete(ts.names, n)
			delete(ts.known, n)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	st.updateInterest()
	return st.respond(t, time.Time{})
}

func (st *deltaStream) subsOf() [4]*subs {
	return [4]*subs{&st.types[0].subs, &st.types[1].subs, &st.types[2].subs, &st.types[3].subs}
}

func (st *deltaStream) updateInterest() {
	st.s.hub.setInterest(st.w, st.subsOf(), st.node)
}

// push handles the changes the hub marked.
func (st *deltaStream) push() error { return pushTypes(st.w, st.subsOf(), st.respond) }

// respond sends what changed for type t: resources whose version differs
// from what the client holds, and removals for names it holds (or asked
// for) that do not exist.
func (st *deltaStream) respond(t int, since time.Time) error {
	s, ts := st.s, &st.types[t]
	snap := s.store.Snapshot()
	want := map[string]struct{}{}
	for n := range ts.names {
		want[n] = struct{}{}
	}
	if ts.wildcard {
		for _, n := range snap.Services() {
			want[n] = struct{}{}
		}
		// Under a wildcard, what the client holds and is gone must be
		// removed too.
		for n := range ts.known {
			want[n] = struct{}{}
		}
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	resp := &v3discoverypb.DeltaDiscoveryResponse{TypeUrl: typeURLs[t], SystemVersionInfo: strconv.FormatUint(snap.Version(), 10)}
	sent := map[string]string{}
	for _, n := range names {
		r, exists := s.lookupFor(t, n, st.node, st.w, snap)
		have, holds := ts.known[n]
		switch {
		case r != nil:
			if holds && have == r.version || ts.rejected[n] == r.version {
				continue
			}
			resp.Resources = append(resp.Resources, &v3discoverypb.Resource{Name: n, Version: r.version, Resource: r.any})
			sent[n] = r.version
		case !exists:
			if holds && have == "" {
				continue // already told
			}
			if _, explicit := ts.names[n]; !explicit && !holds {
				continue
			}
			resp.RemovedResources = append(resp.RemovedResources, n)
			sent[n] = ""
		}
	}
	// The first response for a type goes out even when empty (nothing
	// registered under a wildcard, or a reconnect that holds everything
	// current): Envoy finishes starting only once each type it asked for
	// was answered, else it waits out its initial_fetch_timeout (15 s).
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 && ts.nonce != "" {
		s.metrics.suppressed.WithLabelValues(shortType(typeURLs[t])).Inc()
		return nil
	}
	st.nonce++
	resp.Nonce = strconv.FormatUint(st.nonce, 10)
	if err := st.stream.Send(resp); err != nil {
		return err
	}
	ts.nonce, ts.sent = resp.Nonce, sent
	for n, v := range sent {
		if _, explicit := ts.names[n]; v == "" && !explicit {
			delete(ts.known, n) // gone under a wildcard: forget it once told
			continue
		}
		ts.known[n] = v
	}
	s.metrics.pushes.WithLabelValues(shortType(typeURLs[t])).Inc()
	if !since.IsZero() {
		s.metrics.pushLatency.Observe(time.Since(since).Seconds())
	}
	return nil
}
