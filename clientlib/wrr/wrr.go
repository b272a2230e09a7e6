package wrr

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/serviceconfig"
)

// Name is the name the balancer is registered under. An xDS control plane
// selects it with a TypedStruct whose type_url is TypeURL.
const Name = "spillway.wrr"

// TypeURL is the type_url of the xds.type.v3.TypedStruct (or
// udpa.type.v1.TypedStruct) that names this balancer in a Cluster's
// load_balancing_policy: grpc-go takes the part after the last '/' as the
// balancer name (gRFC A52).
const TypeURL = "type.googleapis.com/" + Name

func init() {
	balancer.Register(builder{})
}

// lbConfig is the balancer's configuration. It has no fields yet.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig `json:"-"`
}

type builder struct{}

func (builder) Name() string { return Name }

// ParseConfig accepts a JSON object (or null). Fields it does not know are
// ignored, not rejected: grpc-go parses the config when it receives the
// Cluster, and an error there would make an older client NACK the Cluster
// of a control plane that added a field.
func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(js, &fields); err != nil {
		return nil, fmt.Errorf("%s: config %s is not a JSON object: %w", Name, js, err)
	}
	return &lbConfig{}, nil
}

// Build returns a balancer that keeps one pick_first child per endpoint
// (grpc-go's endpointsharding, as round_robin does) and picks among the
// READY ones by weight.
func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &wrrBalancer{ClientConn: cc}
	b.child = endpointsharding.NewBalancer(b, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return b
}

// wrrBalancer sits between the channel and an endpointsharding balancer: it
// passes the channel's calls down, and replaces the picker that comes up
// with a weighted one.
//
// grpc-go serializes the balancer.Balancer methods; UpdateState is called
// by endpointsharding with its own lock held, from those methods or from a
// child's callbacks, so it must not call back into child.
type wrrBalancer struct {
	balancer.ClientConn // the channel; UpdateState is intercepted
	child               balancer.Balancer
}

func (b *wrrBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	// BalancerConfig is *lbConfig or nil (loadBalancingPolicy by name);
	// neither carries anything today.
	return b.child.UpdateClientConnState(balancer.ClientConnState{
		// As round_robin: let pick_first children see client-side health
		// checks and outlier detection.
		ResolverState: pickfirst.EnableHealthListener(s.ResolverState),
	})
}

func (b *wrrBalancer) ResolverError(err error) { b.child.ResolverError(err) }

func (b *wrrBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {
	// Children create their own SubConns with StateListener; nothing comes
	// here.
}

func (b *wrrBalancer) ExitIdle() { b.child.ExitIdle() }

func (b *wrrBalancer) Close() { b.child.Close() }

// UpdateState receives endpointsharding's aggregate state. When at least
// one endpoint is READY, it publishes a picker over the READY endpoints
// weighted by their EDS weights; otherwise it passes the state through
// (CONNECTING, IDLE or TRANSIENT_FAILURE, with that state's picker).
func (b *wrrBalancer) UpdateState(state balancer.State) {
	children := endpointsharding.ChildStatesFromPicker(state.Picker)
	var pickers []balancer.Picker
	var weights []uint32
	for _, c := range children {
		if c.State.ConnectivityState != connectivity.Ready {
			continue
		}
		pickers = append(pickers, c.State.Picker)
		weights = append(weights, endpointWeight(c))
	}
	if len(pickers) == 0 {
		b.ClientConn.UpdateState(state)
		return
	}
	b.ClientConn.UpdateState(balancer.State{
		ConnectivityState: connectivity.Ready,
		Picker:            &picker{pickers: pickers, sched: newEDF(weights, rand.Uint32)},
	})
}

// endpointWeight is the weight grpc-go's xDS cluster resolver attached to
// the endpoint (from EDS, scaled by its locality's share); missing or 0
// counts as 1.
func endpointWeight(c endpointsharding.ChildState) uint32 {
	return max(weight.FromEndpoint(c.Endpoint).Weight, 1)
}

// picker picks a READY endpoint by earliest-deadline-first over the
// endpoints' weights and delegates to that endpoint's pick_first picker.
type picker struct {
	pickers []balancer.Picker // read-only; one per scheduler entry

	mu    sync.Mutex // guards sched
	sched *edf
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	p.mu.Lock()
	i := p.sched.next()
	p.mu.Unlock()
	return p.pickers[i].Pick(info)
}
