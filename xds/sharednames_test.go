package xds

import (
	"reflect"
	"testing"

	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

// mapID is a map's identity, to tell a shared set from an equal copy.
func mapID(m map[string]struct{}) uintptr { return uintptr(reflect.ValueOf(m).UnsafePointer()) }

// TestSharedOneNameSets: the streams that subscribe to one known service,
// as grpc-go's do, hold one shared set for all four types and the hub
// holds it too, instead of five maps per stream; a request that names
// more, or an unknown service, gets a set of its own and leaves the shared
// one as it was; an ACK or a NACK of the shared set is still handled.
func TestSharedOneNameSets(t *testing.T) {
	a, _ := benchStream(t, 9, false)
	b := &sotwStream{s: a.s, stream: &discardStream{codec: newCodec()}}
	b.w = newWatcher(func(bool) {})
	b.fan = a.s.fan
	for _, url := range typeURLs {
		if err := b.handle(&v3discoverypb.DiscoveryRequest{TypeUrl: url, ResourceNames: []string{"web"}}); err != nil {
			t.Fatal(err)
		}
	}
	shared := mapID(a.s.cache.entry("web").one)
	for i, st := range []*sotwStream{a, b} {
		for ti := range st.types {
			if got := mapID(st.types[ti].names); got != shared {
				t.Errorf("stream %d type %d: names is its own map, want the shared set of web", i, ti)
			}
		}
		a.s.hub.mu.Lock()
		got := mapID(st.w.names)
		a.s.hub.mu.Unlock()
		if got != shared {
			t.Errorf("stream %d: the hub holds its own map, want the shared set of web", i)
		}
	}

	// A NACK of the shared set is recorded, and changes nothing.
	if err := a.push(); err != nil {
		t.Fatal(err)
	}
	eds := &a.types[3]
	nack := &v3discoverypb.DiscoveryRequest{TypeUrl: typeURLs[3], ResourceNames: []string{"web"},
		ResponseNonce: eds.nonce, VersionInfo: eds.version(), ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "bad"}}
	if err := a.handle(nack); err != nil {
		t.Fatal(err)
	}
	if !eds.hasNacked || eds.nacked != eds.sent {
		t.Errorf("after a NACK: nacked = %x (set %v), want the version sent %x", eds.nacked, eds.hasNacked, eds.sent)
	}

	// Two names, then an unknown one: sets of the stream's own; the shared
	// set still holds web alone.
	for _, names := range [][]string{{"web", "api"}, {"no-such-service"}} {
		if err := b.handle(&v3discoverypb.DiscoveryRequest{TypeUrl: typeURLs[3], ResourceNames: names}); err != nil {
			t.Fatal(err)
		}
		if mapID(b.types[3].names) == shared {
			t.Errorf("request for %v: names is the shared set, want a set of its own", names)
		}
		want := map[string]struct{}{}
		for _, n := range names {
			want[n] = struct{}{}
		}
		if diff := cmp.Diff(want, b.types[3].names); diff != "" {
			t.Errorf("request for %v: names (-want +got):\n%s", names, diff)
		}
		b.s.hub.mu.Lock()
		_, hubHas := b.w.names[names[0]]
		b.s.hub.mu.Unlock()
		if !hubHas {
			t.Errorf("request for %v: the hub's names lack %q", names, names[0])
		}
	}
	if diff := cmp.Diff(map[string]struct{}{"web": {}}, a.s.cache.entry("web").one); diff != "" {
		t.Errorf("shared set of web (-want +got):\n%s", diff)
	}
	if got := mapID(a.types[3].names); got != shared {
		t.Error("stream a lost the shared set when stream b changed its subscription")
	}
}
