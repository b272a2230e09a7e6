package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	kubesource "github.com/spillway/spillway/registry/kubernetes"
)

// KubernetesConfig is the kubernetes: block of the config file: the
// clusters whose EndpointSlices feed the registry. No cluster and no
// in_cluster (the default) leaves the source off.
type KubernetesConfig struct {
	Clusters []KubernetesCluster `yaml:"clusters"`
	// InCluster watches the cluster spillway runs in, with its service
	// account; InClusterName names it ("" means "local").
	InCluster     bool   `yaml:"in_cluster"`
	InClusterName string `yaml:"in_cluster_name"`
	// Namespaces to watch; empty means all.
	Namespaces    []string `yaml:"namespaces"`
	LabelSelector string   `yaml:"label_selector"`
	// ServiceName is the registry name of a Service: "" means
	// "{service}.{namespace}"; {cluster} is also replaced.
	ServiceName string `yaml:"service_name"`
	// UnnamedPort names a Service's unnamed port ("" means "grpc").
	UnnamedPort string `yaml:"unnamed_port"`
	// SyncTimeout bounds the wait for the clusters' first sync at start
	// (0 means 30s); MaxStaleness, if set, drops an unreachable cluster's
	// endpoints after that long (0: keep them).
	SyncTimeout  time.Duration `yaml:"sync_timeout"`
	MaxStaleness time.Duration `yaml:"max_staleness"`
}

// KubernetesCluster is one entry of kubernetes.clusters.
type KubernetesCluster struct {
	// Name is a DNS label; "" derives it from the kubeconfig file name.
	Name       string `yaml:"name"`
	Kubeconfig string `yaml:"kubeconfig"`
	Context    string `yaml:"context"`
}

func (k *KubernetesConfig) enabled() bool { return k.InCluster || len(k.Clusters) > 0 }

// validate checks what can be checked without reading kubeconfigs; the
// source checks the rest when it starts.
func (k *KubernetesConfig) validate() error {
	switch {
	case k.SyncTimeout < 0:
		return fmt.Errorf("kubernetes.sync_timeout: %v, want > 0 (0 means 30s)", k.SyncTimeout)
	case k.MaxStaleness < 0:
		return fmt.Errorf("kubernetes.max_staleness: %v, want >= 0 (0: never drop)", k.MaxStaleness)
	}
	for i, c := range k.Clusters {
		if c.Name != "" {
			if err := registry.ValidateLabel(fmt.Sprintf("kubernetes.clusters[%d].name", i), c.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// kubeconfigFlag collects repeated --kubeconfig PATH flags.
type kubeconfigFlag []string

func (f *kubeconfigFlag) String() string { return strings.Join(*f, ",") }

func (f *kubeconfigFlag) Set(path string) error {
	if path == "" {
		return errors.New("empty path")
	}
	*f = append(*f, path)
	return nil
}

// clusters are the flags' clusters, named after their files.
func (f kubeconfigFlag) clusters() []KubernetesCluster {
	out := make([]KubernetesCluster, 0, len(f))
	for _, p := range f {
		out = append(out, KubernetesCluster{Kubeconfig: filepath.Clean(p)})
	}
	return out
}

// startKubernetes starts the Kubernetes source if any cluster is
// configured, and waits for its first sync (bounded by
// kubernetes.sync_timeout). It returns nil when none is.
func startKubernetes(ctx context.Context, k KubernetesConfig, store *registry.Store, reg prometheus.Registerer,
	log *slog.Logger, wg *sync.WaitGroup, fail func(string, error)) (*kubesource.Source, error) {
	if !k.enabled() {
		return nil, nil
	}
	cfg := kubesource.Config{
		InCluster:     k.InCluster,
		InClusterName: k.InClusterName,
		Namespaces:    k.Namespaces,
		LabelSelector: k.LabelSelector,
		ServiceName:   k.ServiceName,
		UnnamedPort:   k.UnnamedPort,
		SyncTimeout:   k.SyncTimeout,
		MaxStaleness:  k.MaxStaleness,
		Store:         store,
		Logger:        log,
		Registerer:    reg,
	}
	for _, c := range k.Clusters {
		cfg.Clusters = append(cfg.Clusters, kubesource.ClusterConfig{Name: c.Name, Kubeconfig: c.Kubeconfig, Context: c.Context})
	}
	src, err := kubesource.New(cfg)
	if err != nil {
		return nil, err
	}
	ready := make(chan struct{}, 1)
	wg.Go(func() { fail("kubernetes source", src.Run(ctx, ready)) })
	select {
	case <-ready:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	for _, st := range src.Status() {
		log.Info("kubernetes cluster", "status", st.String())
	}
	return src, nil
}
