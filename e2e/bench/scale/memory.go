package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/e2e/bench/internal/procstat"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/xds"
)

// The memory part holds the region in-process in the real packages, the
// way cmd/spillway wires them with --data-dir "" (VM registrations in an
// in-memory systemstore), and reads the Go heap after a GC as each layer
// is added:
//
//  1. the registry store, loaded by Apply batches of VM endpoints;
//  2. the durable records (systemstore.NewMemory, what --data-dir ""
//     keeps on the heap; bbolt and etcd keep them off the Go heap) and
//     the lease manager, restored from them (lease.Restore, as at
//     startup): one lease per endpoint;
//  3. the DNS resolver, every service asked once for SRV and A over UDP
//     on 127.0.0.1 with miekg/dns as the client, so every per-service
//     answer cache is built;
//  4. the xDS server, every service's Listener, RouteConfiguration,
//     Cluster and ClusterLoadAssignment asked for by raw SotW ADS streams
//     on 127.0.0.1 (chunks of services per stream, streams closed after
//     their answers), so its cache holds what subscribed streams make.
//
// The target, registry + DNS + xDS caches <= 1 KiB per endpoint, is
// judged on the live heap after a GC (layers 1, 3 and 4); the leases and
// records are printed beside it. RSS growth (after debug.FreeOSMemory) is
// printed too: it adds the heap's fragmentation and the runtime's own
// structures, and at steady state a Go process holds up to GOGC more.

// memPortName is the endpoints' one port, the name xDS serves by default
// (cmd/spillway's --xds-port-name).
const memPortName = "grpc"

// regEndpoint is region endpoint ep as the registry holds it: a VM
// endpoint with one port. The id is registry.DefaultEndpointID's
// (10-0-0-1-8080), a DNS label; Walk's ID has dots, which the store
// refuses.
func regEndpoint(ep Endpoint, now time.Time) *registry.Endpoint {
	return &registry.Endpoint{
		ID:         registry.DefaultEndpointID(ep.Addr, uint16(ep.Port)),
		Address:    ep.Addr,
		Ports:      []registry.Port{{Name: memPortName, Number: uint16(ep.Port), Protocol: registry.TCP}},
		Locality:   registry.Locality{Zone: ep.Zone},
		Health:     registry.Healthy,
		Weight:     registry.DefaultWeight,
		Source:     registry.SourceVM,
		Registered: now,
		LastSeen:   now,
	}
}

// memSample is the process after a GC.
type memSample struct {
	live  uint64 // runtime.MemStats.HeapAlloc after GC: live heap
	inuse uint64 // HeapInuse: spans holding live objects
	rss   int64  // VmRSS after debug.FreeOSMemory, bytes
}

func sampleMem() (memSample, error) {
	runtime.GC()
	debug.FreeOSMemory() // GCs again and returns free spans to the OS
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	kib, err := procstat.RSSKiB(os.Getpid())
	if err != nil {
		return memSample{}, fmt.Errorf("read RSS: %w", err)
	}
	return memSample{live: ms.HeapAlloc, inuse: ms.HeapInuse, rss: kib * 1024}, nil
}

func init() {
	register(part{
		name: "memory",
		doc:  "Go heap per endpoint after a GC for registry store, leases, DNS and xDS caches, held in-process; RSS growth",
		run:  runMemory,
	})
}

func runMemory(ctx context.Context, e *env, r region) ([]figure, error) {
	n := float64(r.Endpoints)
	per := func(a, b memSample) float64 { return (float64(b.live) - float64(a.live)) / n }
	base, err := sampleMem()
	if err != nil {
		return nil, err
	}
	// 1. The registry store.
	t0 := time.Now()
	store, err := registry.NewStoreWith(registry.StoreConfig{})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var names []string
	ops := make([]registry.Op, 0, 1000)
	var applyErr error
	r.Walk(func(ep Endpoint) bool {
		if len(names) == 0 || names[len(names)-1] != ep.Service {
			names = append(names, ep.Service)
		}
		ops = append(ops, registry.Upsert(ep.Service, regEndpoint(ep, now)))
		if len(ops) == cap(ops) {
			if _, applyErr = store.Apply(ops...); applyErr != nil {
				return false
			}
			ops = ops[:0]
		}
		return true
	})
	if applyErr == nil && len(ops) > 0 {
		_, applyErr = store.Apply(ops...)
	}
	if applyErr != nil {
		return nil, fmt.Errorf("load the store: %w", applyErr)
	}
	ops = nil
	store.MarkSynced()
	if got := store.Snapshot().EndpointCount(); got != r.Endpoints {
		return nil, fmt.Errorf("store holds %d endpoints, want %d", got, r.Endpoints)
	}
	afterStore, err := sampleMem()
	if err != nil {
		return nil, err
	}
	e.Logf("memory: store loaded in %v", time.Since(t0).Round(time.Millisecond))

	// 2. Durable records in memory (--data-dir ""), one per endpoint as
	// Register writes it, then the leases restored from them.
	t1 := time.Now()
	mem := systemstore.NewMemory()
	snap := store.Snapshot()
	for _, name := range names {
		svc, _ := snap.Service(name)
		for _, ep := range svc.Endpoints {
			rec := systemstore.Record{LeaseID: leaseID(), Service: name, TTL: lease.DefaultTTL, Endpoint: *ep}
			if err := mem.Put(ctx, rec); err != nil {
				return nil, err
			}
		}
	}
	snap = nil
	afterRecs, err := sampleMem()
	if err != nil {
		return nil, err
	}
	leases, err := lease.New(lease.Config{Store: store, Storage: mem})
	if err != nil {
		return nil, err
	}
	restored, err := leases.Restore(ctx)
	if err != nil {
		return nil, err
	}
	if restored != r.Endpoints || leases.Len() != r.Endpoints {
		return nil, fmt.Errorf("restored %d leases (the manager holds %d), want %d", restored, leases.Len(), r.Endpoints)
	}
	afterLeases, err := sampleMem()
	if err != nil {
		return nil, err
	}
	e.Logf("memory: %d records and leases in %v", restored, time.Since(t1).Round(time.Millisecond))

	// 3. DNS, every service's SRV and A answers built.
	t2 := time.Now()
	dnsSrv, err := resolver.New(resolver.Config{Store: store, Domain: registry.DefaultDomain})
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	dctx, dstop := context.WithCancel(ctx)
	dnsDone := make(chan error, 1)
	go func() { dnsDone <- dnsSrv.Serve(dctx, pc, nil) }()
	defer func() { dstop(); <-dnsDone }()
	answered, err := warmDNS(ctx, pc.LocalAddr().String(), names)
	if err != nil {
		return nil, err
	}
	afterDNS, err := sampleMem()
	if err != nil {
		return nil, err
	}
	e.Logf("memory: DNS warmed (%d answers) in %v", answered, time.Since(t2).Round(time.Millisecond))

	// 4. xDS, every service's four resources built.
	t3 := time.Now()
	xs, err := xds.New(xds.Config{Store: store, PortName: memPortName})
	if err != nil {
		return nil, err
	}
	xctx, xstop := context.WithCancel(ctx)
	xdsDone := make(chan error, 1)
	go func() { xdsDone <- xs.Run(xctx) }()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		xstop()
		<-xdsDone
		return nil, err
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(xds.Codec())) // as cmd/spillway
	xs.Register(gs)
	go gs.Serve(lis)
	defer func() { gs.Stop(); xstop(); <-xdsDone }()
	got, err := warmXDS(ctx, lis.Addr().String(), names, 250)
	if err != nil {
		return nil, err
	}
	afterXDS, err := sampleMem()
	if err != nil {
		return nil, err
	}
	e.Logf("memory: xDS warmed (%d resources) in %v", got, time.Since(t3).Round(time.Millisecond))
	// Keep every layer alive up to the last sample.
	runtime.KeepAlive(leases)
	runtime.KeepAlive(mem)
	runtime.KeepAlive(dnsSrv)
	runtime.KeepAlive(xs)

	storeB, recsB, leasesB := per(base, afterStore), per(afterStore, afterRecs), per(afterRecs, afterLeases)
	dnsB, xdsB := per(afterLeases, afterDNS), per(afterDNS, afterXDS)
	note := func(f figure, s string) figure { f.Note = s; return f }
	return []figure{
		{Name: "heap: registry store per endpoint", Value: storeB, Unit: "B"},
		{Name: "heap: leases per endpoint", Value: leasesB, Unit: "B"},
		note(figure{Name: "heap: in-memory records per endpoint", Value: recsB, Unit: "B"},
			`systemstore.NewMemory, what --data-dir "" keeps; bbolt and etcd hold them off the Go heap, so not in the totals`),
		{Name: "heap: DNS caches per endpoint", Value: dnsB, Unit: "B"},
		{Name: "heap: xDS caches per endpoint", Value: xdsB, Unit: "B"},
		note(atMost("heap: registry + DNS + xDS per endpoint", storeB+dnsB+xdsB, "B", 1024),
			"live heap after a GC (runtime.MemStats.HeapAlloc), store + DNS + xDS caches; the target is judged here"),
		note(figure{Name: "heap: with leases per endpoint", Value: storeB + leasesB + dnsB + xdsB, Unit: "B"},
			"the same plus one VM lease per endpoint (registry/lease)"),
		note(figure{Name: "heap in use (spans) per endpoint", Value: (float64(afterXDS.inuse) - float64(base.inuse)) / n, Unit: "B"},
			"runtime.MemStats.HeapInuse growth, every layer and the in-memory records"),
		note(figure{Name: "RSS growth per endpoint", Value: float64(afterXDS.rss-base.rss) / n, Unit: "B"},
			"VmRSS after debug.FreeOSMemory, every layer and the in-memory records; a running server holds up to GOGC (100 %) more heap between GCs"),
		{Name: "time to build and warm", Value: time.Since(t0).Seconds(), Unit: "s"},
	}, nil
}

func leaseID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// warmDNS asks every service's SRV (_grpc._tcp) and A once over UDP with
// EDNS0 at 1232 bytes, from a few concurrent clients, and returns the
// answers received. An answer too large for UDP comes back with TC; the
// server built and cached it all the same.
func warmDNS(ctx context.Context, addr string, names []string) (int, error) {
	var next, answered atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			c := &dns.Client{Net: "udp", Timeout: 5 * time.Second, UDPSize: 1232}
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(names) {
					return
				}
				for _, q := range []struct {
					name  string
					qtype uint16
				}{
					{"_" + memPortName + "._tcp." + names[i] + "." + registry.DefaultDomain, dns.TypeSRV},
					{names[i] + "." + registry.DefaultDomain, dns.TypeA},
				} {
					m := new(dns.Msg)
					m.SetQuestion(q.name, q.qtype)
					m.SetEdns0(1232, false)
					var in *dns.Msg
					var err error
					for try := 0; try < 3; try++ { // UDP on a busy machine: ask again
						if in, _, err = c.ExchangeContext(ctx, m, addr); err == nil {
							break
						}
					}
					if err != nil {
						errs[w] = fmt.Errorf("dns %s %s: %w", q.name, dns.TypeToString[q.qtype], err)
						return
					}
					if in.Rcode != dns.RcodeSuccess || (len(in.Answer) == 0 && !in.Truncated) {
						errs[w] = fmt.Errorf("dns %s %s: rcode %s, %d answers", q.name, dns.TypeToString[q.qtype], dns.RcodeToString[in.Rcode], len(in.Answer))
						return
					}
					answered.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return int(answered.Load()), ctx.Err()
}

// xdsTypes are the four types a proxyless gRPC client asks for, in its
// order.
var xdsTypes = [...]string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

// warmXDS subscribes to every service's four resources over raw SotW ADS
// streams on one connection, chunk services per stream, two streams at a
// time, each closed once it has received a response naming as many
// resources of each type as it asked for. Stream i's node is in zone
// ZoneName(i%3), as a region's clients are. It returns the resources
// received.
func warmXDS(ctx context.Context, addr string, names []string, chunk int) (int, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		return 0, fmt.Errorf("dial xds %s: %w", addr, err)
	}
	defer cc.Close()
	client := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(cc)
	var next, total atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range errs {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i*chunk >= len(names) {
					return
				}
				part := names[i*chunk : min((i+1)*chunk, len(names))]
				got, err := xdsChunk(ctx, client, i, part)
				if err != nil {
					errs[w] = err
					return
				}
				total.Add(int64(got))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return int(total.Load()), ctx.Err()
}

func xdsChunk(ctx context.Context, client v3discoverygrpc.AggregatedDiscoveryServiceClient, i int, names []string) (int, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ads, err := client.StreamAggregatedResources(sctx)
	if err != nil {
		return 0, fmt.Errorf("xds stream %d: open: %w", i, err)
	}
	node := &v3corepb.Node{
		Id: fmt.Sprintf("scale-memory-%d", i), Cluster: "scale",
		Locality:             &v3corepb.Locality{Zone: ZoneName(i % regionZones)},
		UserAgentName:        "gRPC Go",
		UserAgentVersionType: &v3corepb.Node_UserAgentVersion{UserAgentVersion: "1.85.0"},
		ClientFeatures:       []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"},
	}
	for j, t := range xdsTypes {
		req := &v3discoverypb.DiscoveryRequest{TypeUrl: t, ResourceNames: names}
		if j == 0 {
			req.Node = node
		}
		if err := ads.Send(req); err != nil {
			return 0, fmt.Errorf("xds stream %d: subscribe: %w", i, err)
		}
	}
	done := map[string]bool{}
	total := 0
	for len(done) < len(xdsTypes) {
		resp, err := ads.Recv()
		if err != nil {
			return 0, fmt.Errorf("xds stream %d: %d of %d types answered: %w", i, len(done), len(xdsTypes), err)
		}
		if len(resp.GetResources()) >= len(names) && !done[resp.GetTypeUrl()] {
			done[resp.GetTypeUrl()] = true
			total += len(resp.GetResources())
		}
	}
	return total, nil
}
