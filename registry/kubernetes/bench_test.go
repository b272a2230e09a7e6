package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/spillway/spillway/registry"
)

// The scales of the benchmarks: services of 20 endpoints (one slice
// each, as the EndpointSlice controller makes them), over 50 namespaces
// and 3 zones.
var benchScales = []struct{ services, perService, nodes int }{
	{500, 20, 100},
	{5000, 20, 1000},
}

const benchNamespaces = 50

// benchCluster is a fake cluster of services × perService endpoints.
func benchCluster(services, perService, nodes int) (*fakeCluster, []*discoveryv1.EndpointSlice) {
	var objs []k8sruntime.Object
	for n := range nodes {
		objs = append(objs, node(fmt.Sprintf("node-%d", n), "us-east1", fmt.Sprintf("us-east1-%c", 'a'+n%3)))
	}
	var slcs []*discoveryv1.EndpointSlice
	ports := []discoveryv1.EndpointPort{port("grpc", 8080, corev1.ProtocolTCP), port("metrics", 9090, corev1.ProtocolTCP)}
	for s := range services {
		var eps []discoveryv1.Endpoint
		for e := range perService {
			i := s*perService + e
			n := i % nodes
			ep := ep(fmt.Sprintf("svc-%d-7d4f9c8b5-%05d", s, e), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), fmt.Sprintf("node-%d", n), ready)
			ep.Zone = ptr(fmt.Sprintf("us-east1-%c", 'a'+n%3))
			eps = append(eps, ep)
		}
		sl := eslice(fmt.Sprintf("ns-%d", s%benchNamespaces), fmt.Sprintf("svc-%d", s), fmt.Sprintf("svc-%d-abcde", s), v4, ports, eps...)
		sl.Labels["app.kubernetes.io/name"] = sl.Labels[discoveryv1.LabelServiceName]
		sl.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-30T00:00:00Z"}
		sl.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: sl.Labels[discoveryv1.LabelServiceName], UID: "0d9c7e0a-6f0e-4c59-9d33-1b2e51f1c2a7"}}
		slcs = append(slcs, sl)
		objs = append(objs, sl)
	}
	// The simple tracker: the field-managed one of fake.NewClientset builds
	// a REST mapper on every update, which would dwarf what is measured.
	return wrapFake("bench", fake.NewSimpleClientset(objs...)), slcs
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkFirstSync: time from Run to the ready signal with every
// endpoint in the store, through real informers over a fake API; the heap
// the source (informer caches and state) and the store hold after it; and
// the store's share once the source is stopped.
func BenchmarkFirstSync(b *testing.B) {
	for _, sc := range benchScales {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d", sc.services, sc.services*sc.perService), func(b *testing.B) {
			f, _ := benchCluster(sc.services, sc.perService, sc.nodes)
			var syncTotal time.Duration
			var heapTotal, storeTotal uint64
			for b.Loop() {
				base := heapAlloc()
				store := registry.NewStore()
				src, err := New(Config{Clusters: []ClusterConfig{{Name: "bench", Client: f.cs}}, Store: store, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				readyC := make(chan struct{}, 1)
				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- src.Run(ctx, readyC) }()
				<-readyC
				syncTotal += time.Since(start)
				if got, want := store.Snapshot().EndpointCount(), sc.services*sc.perService; got != want {
					b.Fatalf("%d endpoints in the store, want %d", got, want)
				}
				heapTotal += heapAlloc() - base
				cancel()
				<-done
				src = nil
				storeTotal += heapAlloc() - base
				runtime.KeepAlive(store)
			}
			n := float64(b.N)
			b.ReportMetric(float64(syncTotal.Milliseconds())/n, "sync-ms")
			b.ReportMetric(float64(heapTotal)/n/(1<<20), "heap-MB")
			b.ReportMetric(float64(storeTotal)/n/(1<<20), "store-MB")
			b.ReportMetric(float64(heapTotal)/n/float64(sc.services*sc.perService), "heap-B/endpoint")
		})
	}
}

// BenchmarkSliceUpdate: one EndpointSlice update (one endpoint flips
// between ready and terminating), from the API client's Update call to the
// store write a subscriber sees, with every other service in place.
func BenchmarkSliceUpdate(b *testing.B) {
	for _, sc := range benchScales {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d", sc.services, sc.services*sc.perService), func(b *testing.B) {
			f, slcs := benchCluster(sc.services, sc.perService, sc.nodes)
			store := registry.NewStore()
			src, err := New(Config{Clusters: []ClusterConfig{{Name: "bench", Client: f.cs}}, Store: store, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			readyC := make(chan struct{}, 1)
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx, readyC) }()
			defer func() { cancel(); <-done }()
			<-readyC
			sub := store.Subscribe("")
			defer sub.Close()
			sub.Changed()
			api := f.cs.DiscoveryV1()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				k := i % len(slcs)
				s := slcs[k]
				st := draining
				if s.Endpoints[0].Conditions.Terminating != nil && *s.Endpoints[0].Conditions.Terminating {
					st = ready
				}
				s.Endpoints[0].Conditions = ep("", "", "", st).Conditions
				got, err := api.EndpointSlices(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
				if err != nil {
					b.Fatal(err)
				}
				slcs[k] = got
				name := renderName(DefaultServiceName, s.Labels[discoveryv1.LabelServiceName], s.Namespace, "")
				for seen := false; !seen; {
					<-sub.C()
					seen = slices.Contains(sub.Changed(), name)
				}
				i++
			}
		})
	}
}

// BenchmarkServiceUpdate: the worker's share of an update: map one
// Service's slice and apply the difference to a store of all services.
func BenchmarkServiceUpdate(b *testing.B) {
	for _, sc := range benchScales {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d", sc.services, sc.services*sc.perService), func(b *testing.B) {
			_, slcs := benchCluster(sc.services, sc.perService, sc.nodes)
			store := registry.NewStore()
			mg := newMerger(store, slog.New(slog.DiscardHandler), newMetrics(nil))
			m := &mapper{unnamedPort: DefaultUnnamedPort}
			slim := slimSlice(labels.Everything(), &interner{})
			parts := map[string]part{}
			for _, s := range slcs {
				o, _ := slim(s)
				eps, _ := m.endpoints([]*discoveryv1.EndpointSlice{o.(*discoveryv1.EndpointSlice)})
				parts[serviceKey(s)] = part{service: renderName(DefaultServiceName, s.Labels[discoveryv1.LabelServiceName], s.Namespace, ""), endpoints: eps}
			}
			mg.update(0, parts, true)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				s := slcs[i%len(slcs)]
				st := draining
				if s.Endpoints[0].Conditions.Terminating != nil && *s.Endpoints[0].Conditions.Terminating {
					st = ready
				}
				s.Endpoints[0].Conditions = ep("", "", "", st).Conditions
				o, _ := slim(s)
				eps, _ := m.endpoints([]*discoveryv1.EndpointSlice{o.(*discoveryv1.EndpointSlice)})
				key := serviceKey(s)
				if failed := mg.update(0, map[string]part{key: {service: parts[key].service, endpoints: eps}}, false); failed != nil {
					b.Fatal(failed)
				}
				i++
			}
			if w := store.Writes(); w < uint64(b.N) {
				b.Fatalf("%d writes for %d updates", w, b.N)
			}
		})
	}
}
