package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Source watches the EndpointSlices of one or more clusters and keeps the
// store's Kubernetes endpoints in step with them.
type Source struct {
	// Read-only after New.
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	merger   *merger
	clusters []*cluster
	now      func() time.Time

	running atomic.Bool
}

// New validates cfg, builds a client and informers per cluster (without
// contacting any API server) and returns a Source. A bad field or an
// unreadable kubeconfig is an error naming the field.
func New(cfg Config) (*Source, error) {
	sel, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{cfg: cfg, log: logger, metrics: newMetrics(cfg.Registerer), now: time.Now}
	s.merger = newMerger(cfg.Store, logger, s.metrics)

	type target struct {
		field  string
		name   string
		client clientset.Interface
	}
	var targets []target
	if cfg.InCluster {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes.in_cluster: %w", err)
		}
		cs, err := newClient(rc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes.in_cluster: %w", err)
		}
		targets = append(targets, target{"kubernetes.in_cluster_name", cfg.InClusterName, cs})
	}
	for i, cc := range cfg.Clusters {
		field := fmt.Sprintf("kubernetes.clusters[%d]", i)
		t := target{field: field + ".name", name: cc.Name, client: cc.Client}
		if t.client == nil {
			rc, current, err := loadKubeconfig(cc)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			if t.name == "" {
				t.name = deriveName(cc, current)
			}
			if t.client, err = newClient(rc); err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
		} else if t.name == "" {
			return nil, fmt.Errorf("%s.name: required with a Client", field)
		}
		targets = append(targets, t)
	}
	seen := map[string]string{}
	for _, t := range targets {
		if err := validateClusterName(t.field, t.name); err != nil {
			return nil, fmt.Errorf("%w (name the cluster)", err)
		}
		if other, dup := seen[t.name]; dup {
			return nil, fmt.Errorf("%s: cluster name %q is also %s's; give each cluster its own name", t.field, t.name, other)
		}
		seen[t.name] = t.field
	}
	for i, t := range targets {
		c, err := newCluster(s, i, t.name, t.client, sel)
		if err != nil {
			return nil, err
		}
		s.clusters = append(s.clusters, c)
	}
	return s, nil
}

// loadKubeconfig reads a cluster's kubeconfig; current is the file's
// current context.
func loadKubeconfig(cc ClusterConfig) (rc *rest.Config, current string, err error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cc.Kubeconfig != "" {
		rules.ExplicitPath = cc.Kubeconfig
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cc.Context})
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %q: %w", cc.Kubeconfig, err)
	}
	rc, err = loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %q, context %q: %w", cc.Kubeconfig, cc.Context, err)
	}
	return rc, raw.CurrentContext, nil
}

// newClient makes a clientset that speaks protobuf, which halves the
// decoding cost of large lists.
func newClient(rc *rest.Config) (clientset.Interface, error) {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "spillway"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return clientset.NewForConfig(rc)
}

// Run watches every cluster until ctx ends, then returns nil once all its
// goroutines are done. It sends one value on ready (when non-nil) as soon
// as every cluster's initial state is in the store, or when SyncTimeout has
// passed (the clusters not synced by then are marked stale and join when
// they sync). It never closes ready. Run may be called once.
func (s *Source) Run(ctx context.Context, ready chan<- struct{}) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("kubernetes: Run called more than once")
	}
	// client-go logs through our logger rather than klog's global one.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(s.log.Handler()))
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, c := range s.clusters {
		for _, inf := range c.informers() {
			wg.Go(func() { inf.RunWithContext(ctx) })
		}
		wg.Go(func() { c.run(ctx) })
	}

	timer := time.NewTimer(s.cfg.SyncTimeout)
	defer timer.Stop()
wait:
	for _, c := range s.clusters {
		select {
		case <-ctx.Done():
			return nil
		case <-c.syncedC:
		case <-timer.C:
			for _, c := range s.clusters {
				c.syncTimedOut(s.cfg.SyncTimeout)
			}
			break wait
		}
	}
	if ready != nil {
		select {
		case ready <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// ClusterStatus is one cluster's state, for /readyz and the logs.
type ClusterStatus struct {
	Name string
	// Synced: the cluster's initial state is in the store.
	Synced bool
	// Stale: its list or watch calls fail (Err says why), or its first sync
	// is late; its last known endpoints are still served unless Dropped.
	Stale      bool
	StaleSince time.Time // zero unless Stale
	Err        string
	// Dropped: stale longer than MaxStaleness, endpoints removed.
	Dropped bool
	// Services and Endpoints count what the cluster contributes.
	Services, Endpoints int
}

// String is a one-line summary, e.g. "kubernetes cluster east: ok, 12
// services, 340 endpoints".
func (st ClusterStatus) String() string {
	head := "kubernetes cluster " + st.Name + ": "
	switch {
	case st.Dropped:
		return fmt.Sprintf("%sSTALE for %v, endpoints dropped (max_staleness): %s", head, time.Since(st.StaleSince).Round(time.Second), st.Err)
	case st.Stale && !st.Synced:
		return fmt.Sprintf("%sSTALE, not synced yet: %s", head, st.Err)
	case st.Stale:
		return fmt.Sprintf("%sSTALE for %v, serving the last known %d services, %d endpoints: %s", head, time.Since(st.StaleSince).Round(time.Second), st.Services, st.Endpoints, st.Err)
	case !st.Synced:
		return head + "syncing"
	}
	return fmt.Sprintf("%sok, %d services, %d endpoints", head, st.Services, st.Endpoints)
}

// Status returns every cluster's state, in configuration order (the
// in-cluster cluster first). Safe for concurrent use.
func (s *Source) Status() []ClusterStatus {
	out := make([]ClusterStatus, len(s.clusters))
	for i, c := range s.clusters {
		out[i] = c.status()
	}
	return out
}
