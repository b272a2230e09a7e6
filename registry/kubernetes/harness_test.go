package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/spillway/spillway/registry"
)

var errDown = errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")

var (
	slicesGVR = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	nodesGVR  = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// fakeCluster is client-go's fake clientset with switches: it can stop
// answering (every list and watch fails, open watches end) and expire its
// watches (a relist). It counts list calls.
type fakeCluster struct {
	name string
	cs   *fake.Clientset
	down atomic.Bool

	lists atomic.Int64

	// mu guards watchers.
	mu       sync.Mutex
	watchers []watch.Interface
}

func newFakeCluster(name string, objs ...runtime.Object) *fakeCluster {
	return wrapFake(name, fake.NewClientset(objs...))
}

// wrapFake adds the switches to a fake clientset.
func wrapFake(name string, cs *fake.Clientset) *fakeCluster {
	f := &fakeCluster{name: name, cs: cs}
	f.cs.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if f.down.Load() {
			return true, nil, errDown
		}
		f.lists.Add(1)
		return false, nil, nil
	})
	f.cs.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if f.down.Load() {
			return true, nil, errDown
		}
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := f.cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		f.mu.Lock()
		f.watchers = append(f.watchers, w)
		f.mu.Unlock()
		return true, w, nil
	})
	return f
}

// setDown makes the API server stop answering (and end every open watch)
// or answer again.
func (f *fakeCluster) setDown(down bool) {
	f.down.Store(down)
	if !down {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watchers {
		w.Stop()
	}
	f.watchers = nil
}

// expireWatches ends every open watch with 410 Gone, as an API server does
// when a watch's resource version is compacted: the informers relist.
func (f *fakeCluster) expireWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watchers {
		if rf, ok := w.(*watch.RaceFreeFakeWatcher); ok && !rf.IsStopped() {
			rf.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		}
	}
	f.watchers = nil
}

func (f *fakeCluster) create(t testing.TB, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := f.cs.DiscoveryV1().EndpointSlices(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeCluster) update(t testing.TB, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := f.cs.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeCluster) remove(t testing.TB, ns, name string) {
	t.Helper()
	if err := f.cs.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeCluster) get(t testing.TB, ns, name string) *discoveryv1.EndpointSlice {
	t.Helper()
	s, err := f.cs.DiscoveryV1().EndpointSlices(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fakeCluster) updateNode(t testing.TB, n *corev1.Node) {
	t.Helper()
	if _, err := f.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// harness runs a Source over fake clusters until the test ends.
type harness struct {
	src     *Source
	store   *registry.Store
	reg     *prometheus.Registry
	fakes   []*fakeCluster
	readyC  chan struct{}
	applies atomic.Int64
}

type harnessOpts struct {
	cfg Config
	// afterApply runs after every store write of the source.
	afterApply func(*registry.Store)
	// noWait: do not wait for the ready signal.
	noWait bool
}

func start(t *testing.T, o harnessOpts, fakes ...*fakeCluster) *harness {
	t.Helper()
	h := &harness{store: registry.NewStore(), reg: prometheus.NewRegistry(), fakes: fakes, readyC: make(chan struct{}, 1)}
	cfg := o.cfg
	cfg.Store = h.store
	cfg.Registerer = h.reg
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, f := range fakes {
		cfg.Clusters = append(cfg.Clusters, ClusterConfig{Name: f.name, Client: f.cs})
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	src.merger.afterApply = func() {
		h.applies.Add(1)
		if o.afterApply != nil {
			o.afterApply(h.store)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, h.readyC) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	if !o.noWait {
		select {
		case <-h.readyC:
		case <-time.After(10 * time.Second):
			t.Fatal("no ready signal after 10s")
		}
	}
	return h
}

func (h *harness) cluster(name string) *cluster {
	for _, c := range h.src.clusters {
		if c.name == name {
			return c
		}
	}
	panic("no cluster " + name)
}

func (h *harness) status(name string) ClusterStatus {
	for _, st := range h.src.Status() {
		if st.Name == name {
			return st
		}
	}
	panic("no cluster " + name)
}

func (h *harness) gauge(vec *prometheus.GaugeVec, cluster string) float64 {
	return testutil.ToFloat64(vec.WithLabelValues(cluster))
}

func (h *harness) events(cluster, resource, kind string) float64 {
	return testutil.ToFloat64(h.src.metrics.events.WithLabelValues(cluster, resource, kind))
}

// quiet waits until every cluster's worker has processed all it was told.
func (h *harness) quiet(t testing.TB) {
	t.Helper()
	waitFor(t, "workers idle", func() bool {
		for _, c := range h.src.clusters {
			if !c.quiet() {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond every millisecond for up to 20s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// view is the part of an endpoint the tests compare.
type view struct {
	ID, Address, Ports, Zone, Region string
	Health                           registry.Health
}

func (v view) String() string {
	return fmt.Sprintf("%s %s [%s] %s/%s %s", v.ID, v.Address, v.Ports, v.Region, v.Zone, v.Health)
}

func viewOf(e *registry.Endpoint) view {
	var ports []string
	for _, p := range e.Ports {
		ports = append(ports, fmt.Sprintf("%s=%d/%s", p.Name, p.Number, p.Protocol))
	}
	return view{ID: e.ID, Address: e.Address.String(), Ports: strings.Join(ports, ","),
		Zone: e.Locality.Zone, Region: e.Locality.Region, Health: e.Health}
}

// services views the given services of a snapshot; an unknown service is
// absent from the map, a known one with no endpoints maps to an empty list.
func services(snap *registry.Snapshot, names ...string) map[string][]view {
	out := map[string][]view{}
	for _, n := range names {
		svc, ok := snap.Service(n)
		if !ok {
			continue
		}
		vs := []view{}
		for _, e := range svc.Endpoints {
			vs = append(vs, viewOf(e))
		}
		out[n] = vs
	}
	return out
}

// expect waits until the store shows want for want's services and for the
// unknown ones listed in gone.
func (h *harness) expect(t testing.TB, step string, want map[string][]view, gone ...string) {
	t.Helper()
	names := slices.Concat(slices.Sorted(maps.Keys(want)), gone)
	var diff string
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := services(h.store.Snapshot(), names...)
		if diff = cmp.Diff(want, got); diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: store (-want +got):\n%s", step, diff)
		}
		time.Sleep(time.Millisecond)
	}
}

// Builders of API objects.

func ptr[T any](v T) *T { return &v }

func node(name, region, zone string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if zone != "" {
		n.Labels[labelZone] = zone
	}
	if region != "" {
		n.Labels[labelRegion] = region
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

func port(name string, n int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Port: ptr(n), Protocol: ptr(proto)}
	if name != "" {
		p.Name = ptr(name)
	}
	return p
}

var grpcPort = []discoveryv1.EndpointPort{port("grpc", 8080, corev1.ProtocolTCP)}

func eslice(ns, svc, name string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc,
				discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
			},
		},
		AddressType: at,
		Ports:       ports,
		Endpoints:   eps,
	}
}

// state is an endpoint's conditions.
type state int

const (
	ready state = iota
	notReady
	draining // terminating, serving
	gone     // terminating, not serving
)

func ep(pod, addr, nodeName string, st state) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses: []string{addr},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod, UID: types.UID("uid-" + pod)},
	}
	if nodeName != "" {
		e.NodeName = ptr(nodeName)
	}
	switch st {
	case ready:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	case notReady:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	case draining:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	case gone:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
	}
	return e
}

func withZone(e discoveryv1.Endpoint, zone string) discoveryv1.Endpoint {
	e.Zone = ptr(zone)
	return e
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
