package xds

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/subset"
	"github.com/spillway/spillway/weights/zoneaware"
)

// discardStream is a grpc.ServerStream whose SendMsg runs the codec and
// drops the bytes, so that a benchmark sees spillway's per-stream work and
// not the transport's.
type discardStream struct {
	codec codec
	sent  int
}

func (d *discardStream) SetHeader(metadata.MD) error  { return nil }
func (d *discardStream) SendHeader(metadata.MD) error { return nil }
func (d *discardStream) SetTrailer(metadata.MD)       {}
func (d *discardStream) Context() context.Context     { return context.Background() }
func (d *discardStream) RecvMsg(any) error            { return nil }
func (d *discardStream) SendMsg(m any) error {
	bufs, err := d.codec.Marshal(m)
	if err != nil {
		return err
	}
	d.sent += bufs.Len()
	return nil
}

var _ grpc.ServerStream = (*discardStream)(nil)

// benchStore holds service "web" of n healthy endpoints over three zones
// of region r1, each with one grpc port.
func benchStore(b testing.TB, n int) *registry.Store {
	store := registry.NewStore()
	var ops []registry.Op
	for i := range n {
		ops = append(ops, registry.Upsert("web", &registry.Endpoint{
			ID:       fmt.Sprintf("ep-%d", i),
			Address:  netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: fmt.Sprintf("zone-%c", 'a'+i%3)},
			Health:   registry.Healthy, Source: registry.SourceStatic,
		}))
	}
	if _, err := store.Apply(ops...); err != nil {
		b.Fatal(err)
	}
	return store
}

// benchStream is a state-of-the-world stream of a client in zone-a
// subscribed to the four types of service "web" of n endpoints over three
// zones, with zone-aware weights on or off.
func benchStream(b testing.TB, n int, zoneAware bool) (*sotwStream, *discardStream) {
	store := benchStore(b, n)
	store.MarkSynced()
	cfg := Config{Store: store}
	var s *Server
	if zoneAware {
		var p *weights.Planner
		s, p = newZoneAware(b, cfg, zoneaware.Config{})
		p.Cycle(time.Now())
	} else {
		var err error
		if s, err = New(cfg); err != nil {
			b.Fatal(err)
		}
	}
	ds := &discardStream{codec: newCodec()}
	st := &sotwStream{s: s, stream: ds}
	st.w = newWatcher(func(bool) {})
	st.fan = s.fan
	node := &v3corepb.Node{Id: "bench", Locality: &v3corepb.Locality{Region: "r1", Zone: "zone-a"}}
	for t, url := range typeURLs {
		req := &v3discoverypb.DiscoveryRequest{TypeUrl: url, ResourceNames: []string{"web"}}
		if t == 0 {
			req.Node = node
		}
		if err := st.handle(req); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.push(); err != nil { // the answers to the requests
		b.Fatal(err)
	}
	return st, ds
}

// BenchmarkStreamUpdate is spillway's own work for one stream update on
// the send path: the EDS response of a changed service assembled for one
// stream and handed to the codec, then the client's ACK handled. The
// resource is encoded once and shared (cached), as for every stream after
// the first.
func BenchmarkStreamUpdate(b *testing.B) {
	for _, za := range []bool{false, true} {
		for _, n := range []int{9, 1000} {
			b.Run(fmt.Sprintf("zoneaware=%v/endpoints=%d", za, n), func(b *testing.B) {
				st, _ := benchStream(b, n, za)
				ack := &v3discoverypb.DiscoveryRequest{TypeUrl: typeURLs[3], ResourceNames: []string{"web"}}
				b.ReportAllocs()
				for b.Loop() {
					st.types[3].hasSent = false // as if the content had changed
					st.w.mark("web", false, time.Time{})
					if err := st.push(); err != nil {
						b.Fatal(err)
					}
					ack.VersionInfo, ack.ResponseNonce = st.types[3].version(), st.types[3].nonce
					if err := st.handle(ack); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStreamResync is one stream's share of a resync (Config.Resync)
// when nothing changed: every name marked, re-evaluated, nothing sent.
func BenchmarkStreamResync(b *testing.B) {
	for _, za := range []bool{false, true} {
		b.Run(fmt.Sprintf("zoneaware=%v", za), func(b *testing.B) {
			st, ds := benchStream(b, 9, za)
			sent := ds.sent
			b.ReportAllocs()
			for b.Loop() {
				st.w.mark("", true, time.Time{})
				if err := st.push(); err != nil {
					b.Fatal(err)
				}
			}
			if ds.sent != sent {
				b.Fatalf("resync sent %d bytes, want none", ds.sent-sent)
			}
		})
	}
}

// BenchmarkStreamResyncSubset is BenchmarkStreamResync's zone-aware case
// for a stream of a service with subsets of 10 of its 100 endpoints: the
// resync re-evaluates it, builds its subset and fingerprint, and sends
// nothing.
func BenchmarkStreamResyncSubset(b *testing.B) {
	for _, size := range []int{0, 10} {
		b.Run(fmt.Sprintf("subset_size=%d", size), func(b *testing.B) {
			store := benchStore(b, 100)
			store.MarkSynced()
			var p *weights.Planner
			s, err := New(Config{Store: store, Plans: PlanFunc(func(n string) *weights.Plan { return p.Plan(n) })})
			if err != nil {
				b.Fatal(err)
			}
			strategy := weights.Strategy{ZoneAware: true}
			if size > 0 {
				strategy.Subset = weights.SubsetConfig{Mode: subset.Deterministic, Size: size}
			}
			p, err = weights.NewPlanner(weights.Config{
				Registry: store, Loads: s.Loads(), Clients: s, Zones: s, PortName: s.cfg.PortName, OnChange: s.Dispatch,
				Strategies: weights.StrategyFunc(func(string) weights.Strategy { return strategy }),
			})
			if err != nil {
				b.Fatal(err)
			}
			var streams []*viewStream
			for i := range 30 {
				streams = append(streams, newViewStream(b, s, i))
			}
			p.Cycle(time.Now())
			for _, v := range streams {
				v.push(b)
			}
			st, ds := streams[0].st, streams[0].ds
			sent := ds.sent
			b.ReportAllocs()
			for b.Loop() {
				st.w.mark("", true, time.Time{})
				if err := st.push(); err != nil {
					b.Fatal(err)
				}
			}
			if ds.sent != sent {
				b.Fatalf("resync sent %d bytes, want none", ds.sent-sent)
			}
		})
	}
}
