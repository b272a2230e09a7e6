package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/replica/clusterversion"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/meshweights"
	"github.com/spillway/spillway/replica/ownership"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
)

// MeshConfig is mesh-wide load on a shared store (issue 13): one owner
// replica per shard of services merges every replica's load summaries,
// computes the service's weights and publishes them through the store;
// every replica serves the published weights.
type MeshConfig struct {
	// Load turns it on (the default); false: each replica plans from the
	// load reports it receives itself.
	Load bool `yaml:"load"`
	// Shards is how many shards services are spread over; zero means 16.
	Shards int `yaml:"shards"`
	// StaleCycles is how many weights cycles without a heartbeat of a
	// service's owner a replica waits before it falls back to its own
	// view; zero means 3.
	StaleCycles int `yaml:"stale_cycles"`
	// Addr is the host:port other replicas reach this replica's gRPC
	// port on; "" means --grpc-addr, which must then name a host.
	Addr string `yaml:"addr"`
}

func (c MeshConfig) validate() error {
	switch {
	case c.Shards < 0 || c.Shards > ownership.MaxShards:
		return fmt.Errorf("--mesh-shards (store.replica.mesh.shards): %d, want 1 to %d (0 for %d)", c.Shards, ownership.MaxShards, ownership.DefaultShards)
	case c.StaleCycles < 0:
		return fmt.Errorf("--mesh-stale-cycles (store.replica.mesh.stale_cycles): %d is negative", c.StaleCycles)
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("--mesh-addr (store.replica.mesh.addr): %q: %w", c.Addr, err)
		}
	}
	return nil
}

// meshAddr is the address other replicas dial: --mesh-addr, else
// --grpc-addr when it names a host.
func meshAddr(c MeshConfig, grpcAddr string) (string, error) {
	if c.Addr != "" {
		return c.Addr, nil
	}
	host, _, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		return "", fmt.Errorf("--grpc-addr: %w", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("--mesh-addr: --grpc-addr %s listens on every address; say which one other replicas reach this one on (or --mesh-load=false)", grpcAddr)
	}
	return grpcAddr, nil
}

// meshWeights is the running mesh-wide load of one replica.
type meshWeights struct {
	owners    *ownership.Owners
	merged    *exchange.Merged
	server    *exchange.Server
	sender    *exchange.Sender
	publisher *meshweights.Publisher
	sub       *meshweights.Subscriber
	sel       *meshweights.Selector
}

// meshInputs are what newMeshWeights needs of the rest of the server.
type meshInputs struct {
	cfg       MeshConfig
	store     *registry.Store
	kv        systemstore.KV
	storeName string
	elect     func(name string, ttl time.Duration) (systemstore.Elector, error)
	id        string
	grpcAddr  string
	ttl       time.Duration // the election TTL
	zoneAware zoneaware.Config
	portName  string
	interval  time.Duration // weights cycle
	report    time.Duration // LRS interval: one summary per interval
	xds       *xds.Server
	// utilizations are the backends' reports to this replica, sent to
	// each service's owner with its load.
	utilizations *load.UtilizationTable
	strategies   weights.StrategySource
	local        *weights.Planner
	storeUp      func() bool
	metrics      prometheus.Registerer
	log          *slog.Logger
	// peerCreds dial other replicas: TLS with this replica's own
	// certificate when the listeners speak TLS (tls.go).
	peerCreds credentials.TransportCredentials
	// authz decides which callers may send load summaries (mesh).
	authz exchange.Authorizer
	// identity is the certificate identity peerCreds present, published
	// in the member record ("" without TLS).
	identity string
	// versions is the cluster version in force: from version 2 on, the
	// load exchange binds a certificate only to a member record's
	// identity.
	versions *clusterversion.Versions
	// verifiesPeers is true when the gRPC port verifies client
	// certificates (--client-ca): other replicas' summaries arrive over
	// their certificates.
	verifiesPeers bool
}

func (in meshInputs) dialCreds() credentials.TransportCredentials {
	if in.peerCreds == nil {
		return insecure.NewCredentials()
	}
	return in.peerCreds
}

func newMeshWeights(in meshInputs) (*meshWeights, error) {
	addr, err := meshAddr(in.cfg, in.grpcAddr)
	if err != nil {
		return nil, err
	}
	// A published plan must outlive an owner's handover (its election
	// expires, the next owner takes the shard and heartbeats within a
	// cycle), or every replica falls back to its own view at each one.
	stale := time.Duration(cmp.Or(in.cfg.StaleCycles, meshweights.DefaultStaleCycles)) * in.interval
	if handover := in.ttl + 2*in.interval; stale <= handover {
		return nil, fmt.Errorf("--mesh-stale-cycles (store.replica.mesh.stale_cycles): %d cycles of --weights-interval %v = %v, want more than an owner handover (--election-ttl %v + 2 cycles = %v)",
			cmp.Or(in.cfg.StaleCycles, meshweights.DefaultStaleCycles), in.interval, stale, in.ttl, handover)
	}
	if in.elect == nil {
		return nil, fmt.Errorf("--mesh-load: store %s has no election; run with --mesh-load=false", in.storeName)
	}
	elect := func(name string) (systemstore.Elector, error) { return in.elect(name, in.ttl) }
	m := &meshWeights{}
	m.owners, err = ownership.New(ownership.Config{
		KV: in.kv, ID: in.id, GRPCAddr: addr, Identity: in.identity, MaxVersion: clusterversion.Current,
		Shards: in.cfg.Shards, TTL: in.ttl, Elect: elect,
		Logger: in.log.With("component", "mesh-ownership"), Registerer: in.metrics,
	})
	if err != nil {
		return nil, err
	}
	m.merged = exchange.NewMerged(exchange.MergedConfig{})
	// The owner keeps summaries only from live members (at a live
	// member's address unless the peer has a verified certificate; from
	// cluster version 2 on, a certificate only for the member whose
	// record names its identity), and of them only the services
	// registered and owned here.
	m.server, err = exchange.NewServer(exchange.ServerConfig{
		Merged: m.merged, Logger: in.log, Registerer: in.metrics, Authorizer: in.authz,
		Members: m.owners, Self: in.id, Services: meshServices{in.store, m.owners}, Versions: in.versions,
	})
	if err != nil {
		return nil, err
	}
	services := func() []string { return in.store.Snapshot().Services() }
	m.sub, err = meshweights.NewSubscriber(meshweights.SubscriberConfig{KV: in.kv, Shard: m.owners.Shard, Logger: in.log, Registerer: in.metrics})
	if err != nil {
		return nil, err
	}
	// The owner's planner: the same calculation over the merged load of
	// every replica, for the services this replica owns. Its client
	// zones come from the summaries, which bound them (exchange), not
	// from this replica's own streams. Its metrics would repeat the
	// local planner's names: not registered.
	owner, err := weights.NewPlanner(weights.Config{
		Registry: in.store, Loads: m.merged, Clients: m.merged, Zones: anyZone{},
		PortName: in.portName, ZoneAware: in.zoneAware, Interval: in.interval,
		Owns: m.owners.Owns, Logger: in.log.With("component", "mesh-owner-planner"),
		// The same per-service strategies as the local planner, and the
		// utilization reports every replica forwards.
		Strategies: in.strategies, Utilization: utilizationsOf(m.merged.Utilizations),
		// A new owner's clients keep the subsets the last owner published.
		SubsetMemory: m.sub,
	})
	if err != nil {
		return nil, err
	}
	m.publisher, err = meshweights.NewPublisher(meshweights.PublisherConfig{
		ID: in.id, KV: in.kv, Ownership: meshOwnership{m.owners, unheard(in.verifiesPeers, m.server)}, Merged: meshMerged{m.merged}, Planner: owner,
		Services: services, Shards: m.owners.Shards(), Interval: in.interval,
		Logger: in.log, Registerer: in.metrics,
	})
	if err != nil {
		return nil, err
	}
	m.sel, err = meshweights.NewSelector(meshweights.SelectorConfig{
		Subscriber: m.sub, Local: in.local, Services: services, Interval: in.interval,
		StaleCycles: in.cfg.StaleCycles, StoreUp: in.storeUp, OnChange: in.xds.Dispatch,
		Logger: in.log, Registerer: in.metrics,
	})
	if err != nil {
		return nil, err
	}
	in.local.Subscribe(m.sel.LocalChanged) // a service served from its local plan changes with it
	m.sender = &exchange.Sender{
		ID: in.id, Interval: in.report,
		Local: func(now time.Time) []load.ServiceSummary {
			return exchange.SummarizeWith(in.xds.Loads().Loads("", now), in.xds.ClientCounts(), in.utilizations.All(now))
		},
		Route: func(service string) (string, string, bool) {
			o, _, ok := m.owners.Owner(service)
			return o.ID, o.GRPCAddr, ok && (o.ID == in.id || o.GRPCAddr != "")
		},
		// Every recorded owner hears each round which shards this replica
		// routes to it: a new owner publishes once every live replica
		// has acknowledged its hold (meshweights.Publisher).
		Owners: func() []exchange.ShardOwner {
			var out []exchange.ShardOwner
			for s, r := range m.owners.Records() {
				if r.Owner != "" && !r.Released {
					out = append(out, exchange.ShardOwner{Shard: s, Replica: r.Owner, Addr: r.GRPCAddr, Epoch: r.Epoch})
				}
			}
			return out
		},
		Deliver:     func(s load.Summary) { m.merged.Add(s, time.Now()) },
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(in.dialCreds())},
		Logger:      in.log, Registerer: in.metrics,
	}
	return m, nil
}

// register adds the load exchange to the server's gRPC port.
func (m *meshWeights) register(g grpc.ServiceRegistrar) { m.server.Register(g) }

// run starts every part; fail reports a part that stops with an error.
func (m *meshWeights) run(ctx context.Context, wg *sync.WaitGroup, fail func(string, error)) {
	wg.Go(func() { fail("mesh ownership", m.owners.Run(ctx)) })
	wg.Go(func() { fail("mesh subscriber", m.sub.Run(ctx)) })
	wg.Go(func() { fail("mesh selector", m.sel.Run(ctx)) })
	wg.Go(func() { fail("mesh publisher", m.publisher.Run(ctx)) })
	wg.Go(func() { fail("mesh load sender", m.sender.Run(ctx)) })
}

// anyZone lets the owner's planner keep every client zone the summaries
// name (exchange bounds them per service).
type anyZone struct{}

func (anyZone) Has(string) bool { return true }

// meshOwnership adapts ownership.Owners to meshweights.Ownership.
type meshOwnership struct {
	o *ownership.Owners
	// unheard, or nil, is true of a live member whose summaries this
	// owner refuses whatever they carry: it is not waited for.
	unheard func(ownership.Member) bool
}

func (a meshOwnership) Owns(service string) bool      { return a.o.Owns(service) }
func (a meshOwnership) Shard(service string) int      { return a.o.Shard(service) }
func (a meshOwnership) Epoch(shard int) (int64, bool) { return a.o.Epoch(shard) }

// LiveMembers are the members a new owner waits to hear from (their
// acknowledgement of its hold) before it publishes: the live ones, less
// those it never hears from.
func (a meshOwnership) LiveMembers() []string { return heardMembers(a.o.Members(), a.unheard) }

// heardMembers returns the ids of members, less those unheard (nil: none)
// says it never hears from.
func heardMembers(members []ownership.Member, unheard func(ownership.Member) bool) (ids []string) {
	for _, m := range members {
		if unheard != nil && unheard(m) {
			continue
		}
		ids = append(ids, m.ID)
	}
	return ids
}

// unheard is, when the gRPC port verifies client certificates (so every
// other replica's summaries come over its certificate), the members the
// load exchange refuses over any certificate: from cluster version 2 on,
// a member record without identity (a release the cluster was finalised
// past). Waiting for such a member's acknowledgement would hold every
// handover while it is live. nil otherwise.
func unheard(verifiesPeers bool, srv *exchange.Server) func(ownership.Member) bool {
	if !verifiesPeers {
		return nil
	}
	return srv.RefusesCertificates
}

// meshServices adapts the registry and ownership to exchange.Services.
type meshServices struct {
	store  *registry.Store
	owners *ownership.Owners
}

func (a meshServices) Registered(service string) bool {
	_, ok := a.store.Snapshot().Service(service)
	return ok
}
func (a meshServices) Owns(service string) bool { return a.owners.Owns(service) }
func (a meshServices) Shard(service string) int { return a.owners.Shard(service) }

// meshMerged adapts exchange.Merged to meshweights.MergedLoad.
type meshMerged struct{ m *exchange.Merged }

func (a meshMerged) Acked(replica string, shard int, epoch int64, since time.Time) bool {
	return a.m.Acked(replica, shard, epoch, since)
}
func (a meshMerged) Contributors(service string, now time.Time) []weights.Contributor {
	cs := a.m.Contributors(service, now)
	out := make([]weights.Contributor, len(cs))
	for i, c := range cs {
		out[i] = weights.Contributor{Replica: c.Replica, Age: c.Age}
	}
	return out
}
