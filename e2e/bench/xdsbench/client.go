package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/e2e/bench/xdsbench/internal/benchdata"
)

// The four types every stream subscribes to, in the order a proxyless gRPC
// client first asks for them.
var typeURLs = [...]string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

const edsIndex = 3 // index of resource.EndpointType in typeURLs

// fleet is K raw SotW ADS streams: stream i has node id xdsbench-<i>, zone
// i%zones and subscribes to Listener, RouteConfiguration, Cluster and
// ClusterLoadAssignment of service i%services. Every response is ACKed.
type fleet struct {
	// Read-only after openFleet.
	k        int
	services []benchdata.Service
	// svcOf[i] is the service of stream i; nil means i%len(services).
	svcOf  []int
	cancel context.CancelFunc
	conns  []*grpc.ClientConn

	wg sync.WaitGroup // one per receiving stream

	responses [len(typeURLs)]atomic.Int64 // responses received, by type
	lastResp  atomic.Int64                // UnixNano of the latest response
	synced    atomic.Int64                // streams that have their initial EDS
	reopened  atomic.Int64                // times a failed stream was opened again (successfully)
	edsBytes  atomic.Int64                // bytes of the assignments in EDS responses received
	syncedCh  chan struct{}               // closed when synced reaches k
	// failures counts the errors that made streams reopen, by text (at
	// most maxFailureKinds kinds; the rest count as "other").
	failuresMu sync.Mutex
	failures   map[string]int
	// badInitial counts initial EDS responses whose endpoint count is not
	// the service's.
	badInitial atomic.Int64

	// pending[svc] is the change in flight on service svc, or nil.
	pending []atomic.Pointer[pendingChange]
	// views[i] is stream i's latest EDS, when the fleet tracks every
	// stream's endpoints (subsets: trackEDS); nil otherwise. A stream
	// then counts as synced once its EDS holds some but not all of the
	// service's endpoints: its subset.
	views []atomic.Pointer[edsView]

	errOnce sync.Once
	err     error
	errCh   chan struct{} // closed on the first stream error
}

// pendingChange is one endpoint change being waited for: which EDS state
// reflects it, and the latency of every affected stream that saw it.
type pendingChange struct {
	seq     int
	start   time.Time
	address string // endpoint added or removed
	add     bool
	want    int // affected streams

	mu   sync.Mutex
	lat  []time.Duration
	done chan struct{} // closed when len(lat) reaches want
}

func newPendingChange(c benchdata.Change, want int) *pendingChange {
	return &pendingChange{seq: c.Seq, address: c.Endpoint.Address.String(), add: c.Add, want: want, done: make(chan struct{})}
}

// reflects reports whether the encoded ClusterLoadAssignment cla shows
// the change. It looks for the address as SocketAddress.address writes
// it (field 2, length-delimited: 0x12, its length, its bytes) instead of
// decoding the assignment: at the region's size an assignment holds up to
// 10,000 endpoints and is pushed to hundreds of streams, and decoding each
// made the driver, which shares the cores with the server, the bottleneck
// of the fan-out it measures. No other field of an assignment holds an
// endpoint's address as a whole string.
func (p *pendingChange) reflects(cla []byte) bool {
	needle := append([]byte{0x12, byte(len(p.address))}, p.address...)
	return bytes.Contains(cla, needle) == p.add
}

// claNamed returns the encoded ClusterLoadAssignment named name in resp,
// or nil, reading only each assignment's cluster_name (field 1).
func claNamed(resp *v3discoverypb.DiscoveryResponse, name string) ([]byte, error) {
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != resource.EndpointType {
			continue
		}
		b := a.GetValue()
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return nil, fmt.Errorf("EDS %s: %w", name, protowire.ParseError(n))
			}
			if num == 1 && typ == protowire.BytesType {
				v, m := protowire.ConsumeBytes(b[n:])
				if m < 0 {
					return nil, fmt.Errorf("EDS %s: %w", name, protowire.ParseError(m))
				}
				if string(v) == name {
					return a.GetValue(), nil
				}
				break
			}
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return nil, fmt.Errorf("EDS %s: %w", name, protowire.ParseError(m))
			}
			b = b[n+m:]
		}
	}
	return nil, nil
}

func (p *pendingChange) record(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lat = append(p.lat, d)
	if len(p.lat) == p.want {
		close(p.done)
	}
}

func (p *pendingChange) latencies() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.lat...)
}

// stream is the receiving side's state of one ADS stream, owned by its
// receive goroutine.
type stream struct {
	i      int
	svc    int
	name   string
	ads    v3discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	synced bool
	// client and node open the stream again (reopen); reopens counts
	// the times it was.
	client  v3discoverygrpc.AggregatedDiscoveryServiceClient
	node    *v3corepb.Node
	reopens int
	seen    int // 1 + seq of the latest change this stream saw, 0 for none
}

// openFleet dials addr with ceil(k/perConn) connections and opens k streams,
// perConn per connection. svcOf gives each stream its service (nil:
// stream i has service i%len(services)). Connection c dials from its own
// loopback source address, sourceAddr(c), as clients on distinct hosts
// do. It returns once every stream has sent its four subscriptions;
// waitSynced waits for the answers. With trackEDS the fleet keeps every
// stream's latest EDS (views) and a stream is synced once it holds a
// subset.
func openFleet(ctx context.Context, addr string, k, perConn int, services []benchdata.Service, svcOf []int, zones []string, trackEDS bool) (*fleet, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := &fleet{
		k:        k,
		services: services,
		svcOf:    svcOf,
		cancel:   cancel,
		syncedCh: make(chan struct{}),
		pending:  make([]atomic.Pointer[pendingChange], len(services)),
		errCh:    make(chan struct{}),
	}
	if trackEDS {
		f.views = make([]atomic.Pointer[edsView], k)
	}
	nconn := (k + perConn - 1) / perConn
	for c := range nconn {
		src := &net.TCPAddr{IP: sourceAddr(c).AsSlice()}
		dial := func(ctx context.Context, target string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: src}
			return d.DialContext(ctx, "tcp", target)
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
		if err != nil {
			f.close()
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		f.conns = append(f.conns, cc)
	}
	var open sync.WaitGroup
	errs := make([]error, nconn)
	for c, cc := range f.conns {
		open.Go(func() {
			client := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(cc)
			for i := c * perConn; i < min(k, (c+1)*perConn); i++ {
				if err := f.openStream(ctx, client, i, zones); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	open.Wait()
	if err := errors.Join(errs...); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

func (f *fleet) openStream(ctx context.Context, client v3discoverygrpc.AggregatedDiscoveryServiceClient, i int, zones []string) error {
	st := &stream{i: i, svc: f.serviceOf(i), client: client}
	st.name = f.services[st.svc].Name
	// The node of grpc-go's xDS client, as a bootstrap file would set it.
	st.node = &v3corepb.Node{
		Id:                   fmt.Sprintf("xdsbench-%d", i),
		Cluster:              "xdsbench",
		Locality:             &v3corepb.Locality{Region: benchdata.Region, Zone: zones[i%len(zones)]},
		UserAgentName:        "gRPC Go",
		UserAgentVersionType: &v3corepb.Node_UserAgentVersion{UserAgentVersion: "1.85.0"},
		ClientFeatures:       []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"},
	}
	if err := f.subscribe(ctx, st); err != nil {
		return err
	}
	f.wg.Go(func() { f.receive(ctx, st) })
	return nil
}

// subscribe opens st's ADS stream and sends its four subscriptions.
func (f *fleet) subscribe(ctx context.Context, st *stream) error {
	// WaitForReady: a connection the server sheds while it sets up a
	// storm of them (spillway's admission: --grpc-admit-in-setup and
	// --grpc-admit-setup-timeout) is dialled again with grpc-go's backoff,
	// as an xDS client does, instead of failing the stream.
	ads, err := st.client.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("stream %d: open: %w", st.i, err)
	}
	st.ads = ads
	for j, typeURL := range typeURLs {
		req := &v3discoverypb.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: []string{st.name}}
		if j == 0 {
			req.Node = st.node
		}
		if err := ads.Send(req); err != nil {
			return fmt.Errorf("stream %d: subscribe: %w", st.i, f.streamErr(ads, err))
		}
	}
	return nil
}

// maxReopens bounds how often a failed stream is opened again.
const maxReopens = 5

// reopen opens st again after it failed with err, as an xDS client
// re-creates its ADS stream: a connection storm can overflow a server's
// accept queue (net.core.somaxconn), and the kernel then resets
// connections the client took for open; a busy server's keepalive can end
// a connection whose client answered its ping late. It waits a second per
// earlier attempt first. It reports whether st is open again; false once
// ctx ends or maxReopens attempts failed. A change made while the stream
// was down reaches it with its new initial EDS, or counts as missed.
func (f *fleet) reopen(ctx context.Context, st *stream, err error) bool {
	for ctx.Err() == nil && st.reopens < maxReopens {
		f.noteFailure(err)
		st.reopens++
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(st.reopens) * time.Second):
		}
		if err = f.subscribe(ctx, st); err == nil {
			f.reopened.Add(1)
			return true
		}
	}
	return false
}

// addrPattern matches the IPv4 address and port in an error's text, so
// that failures of different connections count as one kind.
var addrPattern = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

// maxFailureKinds bounds the distinct error texts fleet.failures keeps.
const maxFailureKinds = 8

// noteFailure counts err in f.failures.
func (f *fleet) noteFailure(err error) {
	key := addrPattern.ReplaceAllString(err.Error(), "ADDR")
	if len(key) > 200 {
		key = key[:200]
	}
	f.failuresMu.Lock()
	defer f.failuresMu.Unlock()
	if f.failures == nil {
		f.failures = map[string]int{}
	}
	if _, ok := f.failures[key]; !ok && len(f.failures) >= maxFailureKinds {
		key = "other"
	}
	f.failures[key]++
}

// failureSummary is f.failures as text, the most frequent first, or "".
func (f *fleet) failureSummary() string {
	f.failuresMu.Lock()
	defer f.failuresMu.Unlock()
	keys := slices.Collect(maps.Keys(f.failures))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(f.failures[b]-f.failures[a], strings.Compare(a, b)) })
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d× %s", f.failures[k], k)
	}
	return b.String()
}

// streamErr turns the io.EOF of a failed Send into the stream's status.
func (f *fleet) streamErr(ads grpc.ClientStream, err error) error {
	if rerr := ads.RecvMsg(new(v3discoverypb.DiscoveryResponse)); rerr != nil {
		return rerr
	}
	return err
}

func (f *fleet) fail(err error) {
	f.errOnce.Do(func() {
		f.err = err
		close(f.errCh)
	})
}

// receive reads responses of one stream, ACKs each, and records initial
// EDS and changes. It returns when the stream ends.
func (f *fleet) receive(ctx context.Context, st *stream) {
	for {
		resp, err := st.ads.Recv()
		now := time.Now()
		if err != nil && f.reopen(ctx, st, err) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("stream %d (%s): %w", st.i, st.name, err))
			}
			return
		}
		f.lastResp.Store(now.UnixNano())
		idx := -1
		for j, t := range typeURLs {
			if resp.GetTypeUrl() == t {
				idx = j
			}
		}
		if idx < 0 {
			f.fail(fmt.Errorf("stream %d (%s): response of unexpected type %q", st.i, st.name, resp.GetTypeUrl()))
			return
		}
		f.responses[idx].Add(1)
		if idx == edsIndex {
			n := 0
			for _, a := range resp.GetResources() {
				n += len(a.GetValue())
			}
			f.edsBytes.Add(int64(n))
		}
		if idx == edsIndex {
			if err := f.onEDS(st, resp, now); err != nil {
				f.fail(err)
				return
			}
		}
		ack := &v3discoverypb.DiscoveryRequest{
			TypeUrl:       resp.GetTypeUrl(),
			VersionInfo:   resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(),
			ResourceNames: []string{st.name},
		}
		if err := st.ads.Send(ack); err != nil {
			err = f.streamErr(st.ads, err)
			if f.reopen(ctx, st, err) {
				continue
			}
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("stream %d (%s): ack: %w", st.i, st.name, err))
			}
			return
		}
	}
}

func (f *fleet) onEDS(st *stream, resp *v3discoverypb.DiscoveryResponse, now time.Time) error {
	if f.views != nil {
		return f.onTrackedEDS(st, resp, now)
	}
	if !st.synced {
		cla, err := findCLA(resp, st.name)
		if err != nil || cla == nil {
			return err // an EDS response without our resource: wait for the next
		}
		st.synced = true
		n := 0
		for _, l := range cla.GetEndpoints() {
			n += len(l.GetLbEndpoints())
		}
		if n != len(f.services[st.svc].Endpoints) {
			f.badInitial.Add(1)
		}
		if f.synced.Add(1) == int64(f.k) {
			close(f.syncedCh)
		}
		return nil
	}
	p := f.pending[st.svc].Load()
	if p == nil || st.seen == p.seq+1 {
		return nil
	}
	cla, err := claNamed(resp, st.name)
	if err != nil {
		return err
	}
	if cla != nil && p.reflects(cla) {
		st.seen = p.seq + 1
		p.record(now.Sub(p.start))
	}
	return nil
}

// edsView is what one EDS response gave a stream: its endpoint
// addresses, sorted, and when it arrived. Immutable.
type edsView struct {
	addrs []string
	at    time.Time
}

// has reports whether v holds addr; false for a nil v.
func (v *edsView) has(addr string) bool {
	if v == nil {
		return false
	}
	_, ok := slices.BinarySearch(v.addrs, addr)
	return ok
}

// size is the number of endpoints in v, 0 for a nil v.
func (v *edsView) size() int {
	if v == nil {
		return 0
	}
	return len(v.addrs)
}

// same reports whether v and w hold the same endpoints.
func (v *edsView) same(w *edsView) bool {
	if v == nil || w == nil {
		return v == w
	}
	return slices.Equal(v.addrs, w.addrs)
}

// onTrackedEDS records st's EDS in f.views; the stream is synced at its
// first EDS holding some but not all of its service's endpoints.
func (f *fleet) onTrackedEDS(st *stream, resp *v3discoverypb.DiscoveryResponse, now time.Time) error {
	cla, err := findCLA(resp, st.name)
	if err != nil || cla == nil {
		return err
	}
	v := &edsView{at: now}
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			v.addrs = append(v.addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(v.addrs)
	f.views[st.i].Store(v)
	if !st.synced && len(v.addrs) > 0 && len(v.addrs) < len(f.services[st.svc].Endpoints) {
		st.synced = true
		if f.synced.Add(1) == int64(f.k) {
			close(f.syncedCh)
		}
	}
	return nil
}

// sourceAddr is the loopback address connection c dials from:
// 127.100.0.1 + c. A server that limits streams per peer address (as
// spillway's --grpc-max-streams-per-identity does for anonymous callers)
// sees one client per connection, as it would see a fleet of hosts.
func sourceAddr(c int) netip.Addr {
	v := uint32(127<<24|100<<16) + 1 + uint32(c)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// serviceOf is the service of stream i.
func (f *fleet) serviceOf(i int) int {
	if f.svcOf != nil {
		return f.svcOf[i]
	}
	return i % len(f.services)
}

// streamsOf returns the streams subscribed to service svc.
func (f *fleet) streamsOf(svc int) []int {
	var out []int
	if f.svcOf != nil {
		for i, s := range f.svcOf {
			if s == svc {
				out = append(out, i)
			}
		}
		return out
	}
	for i := svc; i < f.k; i += len(f.services) {
		out = append(out, i)
	}
	return out
}

// findCLA returns the ClusterLoadAssignment named name in resp, or nil.
func findCLA(resp *v3discoverypb.DiscoveryResponse, name string) (*v3endpointpb.ClusterLoadAssignment, error) {
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != resource.EndpointType {
			continue
		}
		cla := new(v3endpointpb.ClusterLoadAssignment)
		if err := proto.Unmarshal(a.GetValue(), cla); err != nil {
			return nil, fmt.Errorf("EDS %s: %w", name, err)
		}
		if cla.GetClusterName() == name {
			return cla, nil
		}
	}
	return nil, nil
}

// totalResponses is the number of responses received so far, all types.
func (f *fleet) totalResponses() [len(typeURLs)]int64 {
	var out [len(typeURLs)]int64
	for j := range out {
		out[j] = f.responses[j].Load()
	}
	return out
}

// affected is the number of streams subscribed to service svc.
func (f *fleet) affected(svc int) int {
	if f.svcOf != nil {
		return len(f.streamsOf(svc))
	}
	n := len(f.services)
	return f.k/n + btoi(svc < f.k%n)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitSynced waits until every stream has its initial EDS, printing
// progress every 10 s.
func (f *fleet) waitSynced(ctx context.Context, timeout time.Duration, progress func(synced int64)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-f.syncedCh:
			return nil
		case <-f.errCh:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%d of %d streams have their initial EDS after %v", f.synced.Load(), f.k, timeout)
		case <-tick.C:
			progress(f.synced.Load())
		}
	}
}

// waitQuiet waits until no response has arrived for quiet, for at most
// limit. It reports whether the streams went quiet.
func (f *fleet) waitQuiet(ctx context.Context, quiet, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		last := time.Unix(0, f.lastResp.Load())
		if time.Since(last) >= quiet {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-f.errCh:
			return false
		case <-time.After(min(quiet/4, 50*time.Millisecond) + time.Millisecond):
		}
	}
	return false
}

// close ends every stream and connection and waits (bounded) for the
// receive goroutines.
func (f *fleet) close() {
	f.cancel()
	for _, cc := range f.conns {
		cc.Close()
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// isUnimplemented reports whether err says the server has no ADS service.
func isUnimplemented(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Code() == codes.Unimplemented
}
