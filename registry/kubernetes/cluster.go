package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/spillway/spillway/registry"
)

// Retry backoff for services the store refused.
const (
	retryMin = time.Second
	retryMax = time.Minute
)

// errNotSynced marks a cluster whose first sync did not finish within the
// sync timeout.
var errNotSynced = errors.New("initial sync not finished")

// cluster watches one cluster: informers whose handlers only record keys,
// and one worker (run) that turns keys into parts for the merger.
type cluster struct {
	// Read-only after newCluster.
	idx     int
	name    string
	src     *Source
	log     *slog.Logger
	client  clientset.Interface
	slices  map[string]cache.SharedIndexInformer // by namespace, "" for all
	nodes   cache.SharedIndexInformer
	mapper  mapper
	names   interner      // node and zone names of the slice caches
	trigger chan struct{} // 1 slot: a wake-up for run
	syncedC chan struct{} // closed after the first round

	// mu guards the queue and the connection state.
	mu         sync.Mutex
	dirtyKeys  map[string]struct{} // "<namespace>/<service>"
	dirtyNodes map[string]struct{}
	all        bool   // recompute every Service
	enqSeq     uint64 // bumped by every enqueue
	doneSeq    uint64 // enqSeq as of the start of the last finished round
	// errs holds the last failure of each informer's list or watch calls
	// (and errNotSynced); the cluster is stale while it is not empty.
	errs       map[string]error
	staleSince time.Time
	synced     bool
	dropped    bool
	endpoints  int
	services   int

	// Owner only (run).
	known   map[string]counts // keys with a part in the merger
	retry   map[string]struct{}
	backoff time.Duration
}

// counts are what a key contributes.
type counts struct{ endpoints, skipped int }

func newCluster(src *Source, idx int, name string, client clientset.Interface, sel labels.Selector) (*cluster, error) {
	c := &cluster{
		idx:        idx,
		name:       name,
		src:        src,
		log:        src.log.With("cluster", name),
		client:     client,
		slices:     map[string]cache.SharedIndexInformer{},
		trigger:    make(chan struct{}, 1),
		syncedC:    make(chan struct{}),
		dirtyKeys:  map[string]struct{}{},
		dirtyNodes: map[string]struct{}{},
		errs:       map[string]error{},
		known:      map[string]counts{},
		retry:      map[string]struct{}{},
	}
	c.mapper = mapper{unnamedPort: src.cfg.UnnamedPort, node: c.node}
	if len(src.cfg.Clusters)+btoi(src.cfg.InCluster) > 1 {
		c.mapper.cluster = name
	}
	namespaces := src.cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	selector := src.cfg.LabelSelector
	for _, ns := range namespaces {
		what := "endpointslices"
		if ns != "" {
			what += "/" + ns
		}
		api := client.DiscoveryV1().EndpointSlices(ns)
		inf := cache.NewSharedIndexInformerWithOptions(
			c.listWatch(what,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					o.LabelSelector = selector
					return api.List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					o.LabelSelector = selector
					return api.Watch(ctx, o)
				}),
			&discoveryv1.EndpointSlice{},
			cache.SharedIndexInformerOptions{
				ResyncPeriod: src.cfg.Resync,
				Indexers:     cache.Indexers{byService: indexByService},
			})
		if err := c.setup(inf, what, slimSlice(sel, &c.names), c.sliceHandlers()); err != nil {
			return nil, err
		}
		c.slices[ns] = inf
	}
	nodes := client.CoreV1().Nodes()
	c.nodes = cache.NewSharedIndexInformerWithOptions(
		c.listWatch("nodes",
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return nodes.Watch(ctx, o) }),
		&corev1.Node{},
		cache.SharedIndexInformerOptions{ResyncPeriod: src.cfg.Resync})
	if err := c.setup(c.nodes, "nodes", slimNode, c.nodeHandlers()); err != nil {
		return nil, err
	}
	m := src.metrics
	m.stale.WithLabelValues(name).Set(0)
	m.synced.WithLabelValues(name).Set(0)
	m.dropped.WithLabelValues(name).Set(0)
	m.endpoints.WithLabelValues(name).Set(0)
	m.skipped.WithLabelValues(name).Set(0)
	return c, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setup installs the transform, the error handler and the handlers.
func (c *cluster) setup(inf cache.SharedIndexInformer, what string, transform cache.TransformFunc, h cache.ResourceEventHandler) error {
	if err := inf.SetTransform(transform); err != nil {
		return fmt.Errorf("kubernetes: cluster %s: %s informer: %w", c.name, what, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		c.report(ctx, what, err)
	}); err != nil {
		return fmt.Errorf("kubernetes: cluster %s: %s informer: %w", c.name, what, err)
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		return fmt.Errorf("kubernetes: cluster %s: %s informer: %w", c.name, what, err)
	}
	return nil
}

// listWatch wraps list and watch calls so that their outcome tells whether
// the cluster is reachable.
func (c *cluster) listWatch(what string,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := list(ctx, o)
			c.report(ctx, what, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFn(ctx, o)
			c.report(ctx, what, err)
			return w, err
		},
	}
	// Keep the fake clientset's "no WatchList" marker visible to the
	// reflector through the wrapper.
	return cache.ToListWatcherWithWatchListSemantics(lw, c.client)
}

// report records the outcome of a call to the API server and logs the
// transitions between reachable and stale.
func (c *cluster) report(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return // shutting down
	}
	c.mu.Lock()
	wasStale := len(c.errs) > 0
	if err == nil {
		delete(c.errs, what)
	} else {
		c.errs[what] = err
	}
	changed := c.staleChangedLocked(wasStale)
	since := c.staleSince
	c.mu.Unlock()
	switch {
	case !changed:
		if err != nil {
			c.log.Debug("Kubernetes API call failed", "what", what, "err", err)
		}
	case err != nil:
		c.log.Warn("Kubernetes cluster unreachable; serving its last known endpoints", "what", what, "err", err)
	default:
		c.log.Info("Kubernetes cluster reachable again", "stale_for", c.src.now().Sub(since).Round(time.Millisecond))
	}
}

// staleChangedLocked updates staleSince and the metric after errs changed,
// wakes the worker on a transition and reports whether there was one.
func (c *cluster) staleChangedLocked(wasStale bool) bool {
	stale := len(c.errs) > 0
	if stale == wasStale {
		return false
	}
	if stale {
		c.staleSince = c.src.now()
		c.src.metrics.stale.WithLabelValues(c.name).Set(1)
	} else {
		c.src.metrics.stale.WithLabelValues(c.name).Set(0)
	}
	c.poke()
	return true
}

// syncTimedOut marks the cluster stale if its first round has not finished.
func (c *cluster) syncTimedOut(timeout time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced {
		return
	}
	c.log.Warn("Kubernetes cluster not synced in time; serving without it until it syncs", "timeout", timeout)
	was := len(c.errs) > 0
	c.errs["initial sync"] = fmt.Errorf("%w after %v", errNotSynced, timeout)
	c.staleChangedLocked(was)
}

func (c *cluster) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

func (c *cluster) enqueue(key string) {
	if key == "" {
		return
	}
	c.mu.Lock()
	c.dirtyKeys[key] = struct{}{}
	c.enqSeq++
	c.mu.Unlock()
	c.poke()
}

func (c *cluster) enqueueNode(name string) {
	c.mu.Lock()
	c.dirtyNodes[name] = struct{}{}
	c.enqSeq++
	c.mu.Unlock()
	c.poke()
}

func (c *cluster) event(resource, kind string) {
	c.src.metrics.events.WithLabelValues(c.name, resource, kind).Inc()
}

// sliceHandlers only record the Service keys of changed slices.
func (c *cluster) sliceHandlers() cache.ResourceEventHandler {
	key := func(obj any) string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			return serviceKey(s)
		}
		return ""
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.event("endpointslices", "add")
			c.enqueue(key(obj))
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*discoveryv1.EndpointSlice)
			n, ok2 := newObj.(*discoveryv1.EndpointSlice)
			if ok1 && ok2 && sameSlice(o, n) {
				c.event("endpointslices", "unchanged")
				return
			}
			c.event("endpointslices", "update")
			c.enqueue(key(oldObj))
			c.enqueue(key(newObj))
		},
		DeleteFunc: func(obj any) {
			c.event("endpointslices", "delete")
			c.enqueue(key(obj))
		},
	}
}

// nodeHandlers record nodes whose locality labels changed.
func (c *cluster) nodeHandlers() cache.ResourceEventHandler {
	name := func(obj any) string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return strings.TrimPrefix(t.Key, "/")
		}
		if n, ok := obj.(*corev1.Node); ok {
			return n.Name
		}
		return ""
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.event("nodes", "add")
			c.enqueueNode(name(obj))
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 && sameLocality(o, n) {
				c.event("nodes", "unchanged")
				return
			}
			c.event("nodes", "update")
			c.enqueueNode(name(newObj))
		},
		DeleteFunc: func(obj any) {
			c.event("nodes", "delete")
			c.enqueueNode(name(obj))
		},
	}
}

// node returns a node from the cache, or nil.
func (c *cluster) node(name string) *corev1.Node {
	obj, ok, err := c.nodes.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	n, _ := obj.(*corev1.Node)
	return n
}

// informers are every informer of the cluster.
func (c *cluster) informers() []cache.SharedIndexInformer {
	out := []cache.SharedIndexInformer{c.nodes}
	for _, ns := range slices.Sorted(maps.Keys(c.slices)) {
		out = append(out, c.slices[ns])
	}
	return out
}

// run is the cluster's worker: after the caches sync it applies every
// Service, then whatever the handlers record, until ctx ends.
func (c *cluster) run(ctx context.Context) {
	for _, inf := range c.informers() {
		select {
		case <-ctx.Done():
			return
		case <-inf.HasSyncedChecker().Done():
		}
	}
	c.requestAll()
	c.round(true)
	c.mu.Lock()
	c.synced = true
	was := len(c.errs) > 0
	delete(c.errs, "initial sync")
	c.staleChangedLocked(was)
	c.mu.Unlock()
	c.src.metrics.synced.WithLabelValues(c.name).Set(1)
	close(c.syncedC)
	c.log.Info("Kubernetes cluster synced", "services", len(c.known))

	staleT := time.NewTimer(time.Hour)
	staleT.Stop()
	defer staleT.Stop()
	retryT := time.NewTimer(time.Hour)
	retryT.Stop()
	defer retryT.Stop()
	retryArmed := false
	for {
		// Arm the max-staleness timer for a stale cluster not dropped yet.
		staleT.Stop()
		if maxStale := c.src.cfg.MaxStaleness; maxStale > 0 {
			c.mu.Lock()
			stale, since, dropped := len(c.errs) > 0, c.staleSince, c.dropped
			c.mu.Unlock()
			if stale && !dropped {
				staleT.Reset(max(time.Millisecond, since.Add(maxStale).Sub(c.src.now())))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.trigger:
		case <-staleT.C:
		case <-retryT.C:
			retryArmed = false
			c.mu.Lock()
			for k := range c.retry {
				c.dirtyKeys[k] = struct{}{}
			}
			c.mu.Unlock()
			clear(c.retry)
		}
		if c.round(false) && !retryArmed {
			retryT.Reset(c.backoff)
			retryArmed = true
		}
	}
}

// requestAll asks the worker to recompute every Service: those in the
// caches and those it has a part for.
func (c *cluster) requestAll() {
	c.mu.Lock()
	c.all = true
	c.enqSeq++
	c.mu.Unlock()
	c.poke()
}

// round processes what was queued: it drops or restores the cluster's
// endpoints on staleness, builds a part per dirty key and hands them to the
// merger in one call. It reports whether some keys wait for a retry.
func (c *cluster) round(fresh bool) (retry bool) {
	now := c.src.now()
	c.mu.Lock()
	stale := len(c.errs) > 0
	maxStale := c.src.cfg.MaxStaleness
	switch {
	case !c.dropped && stale && maxStale > 0 && now.Sub(c.staleSince) >= maxStale:
		c.dropped = true
		c.src.metrics.dropped.WithLabelValues(c.name).Set(1)
		c.log.Warn("Kubernetes cluster stale too long; its endpoints are removed until it is back", "max_staleness", maxStale)
		for k := range c.known {
			c.dirtyKeys[k] = struct{}{}
		}
	case c.dropped && !stale:
		c.dropped = false
		c.src.metrics.dropped.WithLabelValues(c.name).Set(0)
		c.log.Info("Kubernetes cluster back; restoring its endpoints")
		fresh = true
		c.all = true
	}
	dropped, all := c.dropped, c.all
	keys, nodes := c.dirtyKeys, c.dirtyNodes
	c.dirtyKeys, c.dirtyNodes, c.all = map[string]struct{}{}, map[string]struct{}{}, false
	seq := c.enqSeq
	c.mu.Unlock()

	if all {
		for _, inf := range c.slices {
			for _, k := range inf.GetIndexer().ListIndexFuncValues(byService) {
				keys[k] = struct{}{}
			}
		}
		for k := range c.known {
			keys[k] = struct{}{}
		}
	}

	if len(nodes) > 0 {
		for _, inf := range c.slices {
			slicesOnNodes(inf.GetIndexer().List(), nodes, keys)
		}
	}
	if len(keys) > 0 {
		parts := make(map[string]part, len(keys))
		next := make(map[string]counts, len(keys))
		for k := range keys {
			p, cnt := c.build(k, dropped)
			parts[k] = p
			next[k] = cnt
		}
		failed := c.src.merger.update(c.idx, parts, fresh)
		for k, cnt := range next {
			if parts[k].gone {
				delete(c.known, k)
			} else {
				c.known[k] = cnt
			}
		}
		for _, k := range failed {
			c.retry[k] = struct{}{}
		}
		c.updateCounts()
	}

	c.mu.Lock()
	c.doneSeq = seq
	c.mu.Unlock()
	if len(c.retry) == 0 {
		c.backoff = 0
		return false
	}
	c.backoff = min(retryMax, max(retryMin, 2*c.backoff))
	return true
}

// build makes the part of one "<namespace>/<service>" key from the cache.
func (c *cluster) build(key string, dropped bool) (part, counts) {
	ns, svc, _ := strings.Cut(key, "/")
	p := part{service: renderName(c.src.cfg.ServiceName, svc, ns, c.name)}
	if err := registry.ValidateService("service", p.service); err != nil {
		// The template can make a name too long for DNS.
		c.log.Warn("Kubernetes Service left out: its registry name is not valid", "service", key, "err", err)
		p.gone = true
		return p, counts{}
	}
	inf := c.slices[ns]
	if inf == nil {
		inf = c.slices[metav1.NamespaceAll]
	}
	var objs []any
	if inf != nil && !dropped {
		objs, _ = inf.GetIndexer().ByIndex(byService, key)
	}
	if len(objs) == 0 {
		p.gone = true
		return p, counts{}
	}
	slcs := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, obj := range objs {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			slcs = append(slcs, s)
		}
	}
	var sk skip
	p.endpoints, sk = c.mapper.endpoints(slcs)
	if sk.total() > 0 {
		c.log.Debug("Kubernetes endpoints left out", "service", key,
			"bad_address", sk.badAddress, "no_ports", sk.noPorts, "id_clash", sk.collision)
	}
	return p, counts{endpoints: len(p.endpoints), skipped: sk.total()}
}

// updateCounts refreshes the per-cluster totals from known.
func (c *cluster) updateCounts() {
	var eps, skipped int
	for _, cnt := range c.known {
		eps += cnt.endpoints
		skipped += cnt.skipped
	}
	c.mu.Lock()
	c.endpoints, c.services = eps, len(c.known)
	c.mu.Unlock()
	c.src.metrics.endpoints.WithLabelValues(c.name).Set(float64(eps))
	c.src.metrics.skipped.WithLabelValues(c.name).Set(float64(skipped))
}

// status reports the cluster's state.
func (c *cluster) status() ClusterStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := ClusterStatus{
		Name:      c.name,
		Synced:    c.synced,
		Stale:     len(c.errs) > 0,
		Dropped:   c.dropped,
		Services:  c.services,
		Endpoints: c.endpoints,
	}
	if st.Stale {
		st.StaleSince = c.staleSince
		for _, what := range slices.Sorted(maps.Keys(c.errs)) {
			st.Err = what + ": " + c.errs[what].Error()
			break
		}
	}
	return st
}

// quiet reports whether everything enqueued so far has been processed.
func (c *cluster) quiet() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.doneSeq == c.enqSeq
}
