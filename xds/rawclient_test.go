package xds_test

// A raw ADS client for protocol tests: it speaks the wire protocol by hand
// over go-control-plane's generated v3 client, so a test controls every
// version, nonce and error_detail, and can assert what the server does and
// does not send.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"

	// Registers the HttpConnectionManager and Router types, so that the
	// Listener's nested Anys decode.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

const (
	// rawRecvTimeout bounds every receive: a test fails, never hangs.
	rawRecvTimeout = 10 * time.Second
	// rawQuiet is how long expectNone waits to assert that nothing comes.
	rawQuiet = 300 * time.Millisecond
)

// rawServer is an xDS server on loopback with its own Config and metrics
// registry, and a client connection to it.
type rawServer struct {
	addr  string
	store *registry.Store
	reg   *prometheus.Registry
	conn  *grpc.ClientConn
	x     *xds.Server
}

// startRawXDS runs an xDS server on store with cfg (Debounce defaults to
// 10 ms here, LRSInterval to 1 s); everything stops when the test ends.
func startRawXDS(t *testing.T, store *registry.Store, cfg xds.Config) *rawServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Store, cfg.Registerer = store, reg
	if cfg.Debounce == 0 {
		cfg.Debounce = 10 * time.Millisecond
	}
	if cfg.LRSInterval == 0 {
		cfg.LRSInterval = time.Second
	}
	x, err := xds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(xds.Codec()))
	x.Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	wg.Go(func() { x.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		srv.Stop()
		wg.Wait()
	})
	s := &rawServer{addr: lis.Addr().String(), store: store, reg: reg, x: x}
	s.conn = rawDial(t, s.addr) // closed before the server stops (cleanups run last-in first-out)
	return s
}

// rawDial opens a plain (non-xDS) client connection, closed at test end.
func rawDial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// metric sums the samples of counter or gauge name whose labels include
// the given name/value pairs.
func (s *rawServer) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// waitMetric waits (bounded) until metric name with labels reaches at
// least want, and returns its value.
func (s *rawServer) waitMetric(t *testing.T, want float64, name string, labels ...string) float64 {
	t.Helper()
	deadline := time.Now().Add(rawRecvTimeout)
	for {
		v := s.metric(t, name, labels...)
		if v >= want {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v after %v, want >= %v", name, labels, v, rawRecvTimeout, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *rawServer) apply(t *testing.T, ops ...registry.Op) {
	t.Helper()
	if _, err := s.store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
}

// rawEndpoint is endpoint i of a service, in zone-a, with weight w (0
// means the default).
func rawEndpoint(i int, w uint32) *registry.Endpoint {
	return &registry.Endpoint{
		ID:       fmt.Sprintf("ep-%d", i),
		Address:  netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
		Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "r1", Zone: "zone-a"},
		Health:   registry.Healthy, Weight: w, Source: registry.SourceStatic,
	}
}

// rawStore returns a synced store holding count endpoints per service.
func rawStore(t *testing.T, services map[string]int) *registry.Store {
	t.Helper()
	store := registry.NewStore()
	var ops []registry.Op
	for svc, n := range services {
		if n == 0 {
			ops = append(ops, registry.Declare(svc))
		}
		for i := range n {
			ops = append(ops, registry.Upsert(svc, rawEndpoint(i+1, 0)))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()
	return store
}

// rawNode is the node every raw client presents.
func rawNode() *v3corepb.Node {
	return &v3corepb.Node{Id: "raw-client", Cluster: "tests", Locality: &v3corepb.Locality{Region: "r1", Zone: "zone-a"}}
}

// recvLoop forwards the stream's messages to out until an error, which it
// reports on errc, or until ctx ends; it closes done on return.
func recvLoop[T any](ctx context.Context, recv func() (T, error), out chan<- T, errc chan<- error, done chan<- struct{}) {
	defer close(done)
	for {
		m, err := recv()
		if err != nil {
			errc <- err
			return
		}
		select {
		case out <- m:
		case <-ctx.Done():
			return
		}
	}
}

// sotwClient is a state-of-the-world ADS stream driven by hand. Its methods
// must be called from the test goroutine.
type sotwClient struct {
	t        *testing.T
	stream   v3discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel   context.CancelFunc
	done     chan struct{}
	resps    chan *v3discoverypb.DiscoveryResponse
	errc     chan error
	sentNode bool
	node     *v3corepb.Node      // the node sent; nil: rawNode()
	names    map[string][]string // per type: the subscribed names
	acked    map[string]string   // per type: the last ACKed version
	nonce    map[string]string   // per type: the last received nonce
	barriers int
}

// newSotwClient opens a state-of-the-world stream on conn; it is closed
// at test end.
func newSotwClient(t *testing.T, conn *grpc.ClientConn) *sotwClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &sotwClient{
		t: t, stream: stream, cancel: cancel, done: make(chan struct{}),
		resps: make(chan *v3discoverypb.DiscoveryResponse, 64), errc: make(chan error, 1),
		names: map[string][]string{}, acked: map[string]string{}, nonce: map[string]string{},
	}
	go recvLoop(ctx, stream.Recv, c.resps, c.errc, c.done)
	t.Cleanup(c.close)
	return c
}

// close ends the stream and waits for its receive goroutine.
func (c *sotwClient) close() {
	c.cancel()
	<-c.done
}

// send sends req as is, adding the node to the stream's first request.
func (c *sotwClient) send(req *v3discoverypb.DiscoveryRequest) {
	c.t.Helper()
	if !c.sentNode {
		req.Node, c.sentNode = rawNode(), true
		if c.node != nil {
			req.Node = c.node
		}
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", shortURL(req.GetTypeUrl()), err)
	}
}

// subscribe replaces the names subscribed for typeURL, carrying the last
// ACKed version and the last nonce, as a well-behaved client does.
func (c *sotwClient) subscribe(typeURL string, names ...string) {
	c.t.Helper()
	c.names[typeURL] = names
	c.send(&v3discoverypb.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names,
		VersionInfo: c.acked[typeURL], ResponseNonce: c.nonce[typeURL]})
}

// ack accepts resp.
func (c *sotwClient) ack(resp *v3discoverypb.DiscoveryResponse) {
	c.t.Helper()
	typ := resp.GetTypeUrl()
	c.acked[typ] = resp.GetVersionInfo()
	c.send(&v3discoverypb.DiscoveryRequest{TypeUrl: typ, ResourceNames: c.names[typ],
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
}

// nack rejects resp: the previous version, resp's nonce and an error.
func (c *sotwClient) nack(resp *v3discoverypb.DiscoveryResponse, reason string) {
	c.t.Helper()
	typ := resp.GetTypeUrl()
	c.send(&v3discoverypb.DiscoveryRequest{TypeUrl: typ, ResourceNames: c.names[typ],
		VersionInfo: c.acked[typ], ResponseNonce: resp.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: reason}})
}

// recv returns the next response, failing the test after rawRecvTimeout.
func (c *sotwClient) recv() *v3discoverypb.DiscoveryResponse {
	c.t.Helper()
	select {
	case resp := <-c.resps:
		c.nonce[resp.GetTypeUrl()] = resp.GetNonce()
		return resp
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(rawRecvTimeout):
		c.t.Fatalf("no response within %v", rawRecvTimeout)
	}
	return nil
}

// recvType receives the next response and checks its type.
func (c *sotwClient) recvType(typeURL string) *v3discoverypb.DiscoveryResponse {
	c.t.Helper()
	resp := c.recv()
	if resp.GetTypeUrl() != typeURL {
		c.t.Fatalf("response type = %s (resources %v), want %s", shortURL(resp.GetTypeUrl()), sotwNames(c.t, resp), shortURL(typeURL))
	}
	if resp.GetVersionInfo() == "" || resp.GetNonce() == "" {
		c.t.Fatalf("%s response has version %q, nonce %q; want both set", shortURL(typeURL), resp.GetVersionInfo(), resp.GetNonce())
	}
	return resp
}

// expectNone asserts that no response arrives within d. Prefer barrier,
// which proves absence without waiting.
func (c *sotwClient) expectNone(d time.Duration) {
	c.t.Helper()
	select {
	case resp := <-c.resps:
		c.t.Fatalf("unexpected %s response version %s, resources %v", shortURL(resp.GetTypeUrl()), resp.GetVersionInfo(), sotwNames(c.t, resp))
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(d):
	}
}

// barrier subscribes typeURL to a fresh name that does not exist and
// requires the next response to be its (empty) answer. The server handles
// a stream's requests in order on one goroutine, so any response owed to
// an earlier request or store change would come first: barrier proves
// that none is owed, without sleeping. typeURL must be a type the test
// does not otherwise use on this stream.
func (c *sotwClient) barrier(typeURL string) {
	c.t.Helper()
	c.barriers++
	name := fmt.Sprintf("barrier-%d", c.barriers)
	c.subscribe(typeURL, name)
	resp := c.recv()
	if resp.GetTypeUrl() != typeURL || len(resp.GetResources()) != 0 {
		c.t.Fatalf("got %s response version %s with %v before the barrier's answer", shortURL(resp.GetTypeUrl()), resp.GetVersionInfo(), sotwNames(c.t, resp))
	}
	c.ack(resp)
}

// deltaClient is a delta ADS stream driven by hand. Its methods must be
// called from the test goroutine.
type deltaClient struct {
	t        *testing.T
	stream   v3discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel   context.CancelFunc
	done     chan struct{}
	resps    chan *v3discoverypb.DeltaDiscoveryResponse
	errc     chan error
	sentNode bool
	barriers int
}

// newDeltaClient opens a delta stream on conn; it is closed at test end.
func newDeltaClient(t *testing.T, conn *grpc.ClientConn) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &deltaClient{
		t: t, stream: stream, cancel: cancel, done: make(chan struct{}),
		resps: make(chan *v3discoverypb.DeltaDiscoveryResponse, 64), errc: make(chan error, 1),
	}
	go recvLoop(ctx, stream.Recv, c.resps, c.errc, c.done)
	t.Cleanup(c.close)
	return c
}

func (c *deltaClient) close() {
	c.cancel()
	<-c.done
}

func (c *deltaClient) send(req *v3discoverypb.DeltaDiscoveryRequest) {
	c.t.Helper()
	if !c.sentNode {
		req.Node, c.sentNode = rawNode(), true
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", shortURL(req.GetTypeUrl()), err)
	}
}

func (c *deltaClient) subscribe(typeURL string, names ...string) {
	c.t.Helper()
	c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names})
}

func (c *deltaClient) unsubscribe(typeURL string, names ...string) {
	c.t.Helper()
	c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesUnsubscribe: names})
}

func (c *deltaClient) ack(resp *v3discoverypb.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
}

func (c *deltaClient) nack(resp *v3discoverypb.DeltaDiscoveryResponse, reason string) {
	c.t.Helper()
	c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: reason}})
}

func (c *deltaClient) recv() *v3discoverypb.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case resp := <-c.resps:
		return resp
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(rawRecvTimeout):
		c.t.Fatalf("no response within %v", rawRecvTimeout)
	}
	return nil
}

func (c *deltaClient) recvType(typeURL string) *v3discoverypb.DeltaDiscoveryResponse {
	c.t.Helper()
	resp := c.recv()
	if resp.GetTypeUrl() != typeURL {
		c.t.Fatalf("response type = %s (resources %v, removed %v), want %s", shortURL(resp.GetTypeUrl()),
			deltaVersions(resp), resp.GetRemovedResources(), shortURL(typeURL))
	}
	if resp.GetNonce() == "" {
		c.t.Fatalf("%s response has no nonce", shortURL(typeURL))
	}
	return resp
}

func (c *deltaClient) expectNone(d time.Duration) {
	c.t.Helper()
	select {
	case resp := <-c.resps:
		c.t.Fatalf("unexpected %s response: resources %v, removed %v", shortURL(resp.GetTypeUrl()), deltaVersions(resp), resp.GetRemovedResources())
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(d):
	}
}

// barrier subscribes typeURL to a fresh name that does not exist and
// requires the next response to be its removal; see sotwClient.barrier.
func (c *deltaClient) barrier(typeURL string) {
	c.t.Helper()
	c.barriers++
	name := fmt.Sprintf("barrier-%d", c.barriers)
	c.subscribe(typeURL, name)
	resp := c.recv()
	if resp.GetTypeUrl() != typeURL || len(resp.GetResources()) != 0 || !slices.Equal(resp.GetRemovedResources(), []string{name}) {
		c.t.Fatalf("got %s response with resources %v, removed %v before the barrier's answer", shortURL(resp.GetTypeUrl()), deltaVersions(resp), resp.GetRemovedResources())
	}
	c.ack(resp)
}

// decodeResource unpacks a resource and returns it with its name.
func decodeResource(t *testing.T, a *anypb.Any) (string, proto.Message) {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("decode %s: %v", a.GetTypeUrl(), err)
	}
	switch r := m.(type) {
	case *v3listenerpb.Listener:
		return r.GetName(), r
	case *v3routepb.RouteConfiguration:
		return r.GetName(), r
	case *v3clusterpb.Cluster:
		return r.GetName(), r
	case *v3endpointpb.ClusterLoadAssignment:
		return r.GetClusterName(), r
	}
	t.Fatalf("unexpected resource type %T", m)
	return "", nil
}

// sotwResources decodes a response's resources by name, checking that
// each is of the response's type.
func sotwResources(t *testing.T, resp *v3discoverypb.DiscoveryResponse) map[string]proto.Message {
	t.Helper()
	out := map[string]proto.Message{}
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != resp.GetTypeUrl() {
			t.Fatalf("resource type %s in a %s response", a.GetTypeUrl(), resp.GetTypeUrl())
		}
		name, m := decodeResource(t, a)
		out[name] = m
	}
	return out
}

// sotwNames lists a response's resource names, sorted.
func sotwNames(t *testing.T, resp *v3discoverypb.DiscoveryResponse) []string {
	t.Helper()
	var names []string
	for n := range sotwResources(t, resp) {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// deltaVersions maps a delta response's resources to their versions.
func deltaVersions(resp *v3discoverypb.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, r := range resp.GetResources() {
		out[r.GetName()] = r.GetVersion()
	}
	return out
}

// endpointCount counts the endpoints of a ClusterLoadAssignment.
func endpointCount(m proto.Message) int {
	n := 0
	for _, l := range m.(*v3endpointpb.ClusterLoadAssignment).GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	return n
}

func shortURL(typeURL string) string {
	switch typeURL {
	case xds.ListenerType:
		return "LDS"
	case xds.RouteType:
		return "RDS"
	case xds.ClusterType:
		return "CDS"
	case xds.EndpointType:
		return "EDS"
	}
	return typeURL
}
