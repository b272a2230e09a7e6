package kubernetes

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/spillway/spillway/registry"
)

// Defaults of Config's zero values.
const (
	DefaultServiceName = "{service}.{namespace}"
	DefaultUnnamedPort = "grpc"
	DefaultSyncTimeout = 30 * time.Second
	DefaultClusterName = "local" // the in-cluster cluster's name
)

// maxClusterName bounds a cluster name, which ends every endpoint id when
// more than one cluster is watched, so ids keep room for the pod name.
const maxClusterName = 20

// Config configures a Source. Error messages name fields by their key in
// spillway's config file (kubernetes.clusters[0].name).
type Config struct {
	// Clusters are the clusters to watch through kubeconfig files.
	Clusters []ClusterConfig
	// InCluster also watches the cluster spillway runs in, with the pod's
	// service account.
	InCluster bool
	// InClusterName names the in-cluster cluster; "" means "local".
	InClusterName string
	// Namespaces to watch; empty means all.
	Namespaces []string
	// LabelSelector, if not "", selects the EndpointSlices to watch
	// (a Service's labels are copied to its slices).
	LabelSelector string
	// ServiceName is the registry service name of a Kubernetes Service:
	// {service}, {namespace} and {cluster} are replaced; "" means
	// "{service}.{namespace}". Without {cluster}, the same Service in
	// several clusters is one registry service.
	ServiceName string
	// UnnamedPort is the port name given to a slice's unnamed port (a
	// Service with one port need not name it); "" means "grpc".
	UnnamedPort string
	// SyncTimeout bounds how long Run waits for the clusters' first sync
	// before it signals ready anyway; zero means 30s.
	SyncTimeout time.Duration
	// MaxStaleness, if positive, is how long a cluster may be unreachable
	// before its endpoints are removed; zero keeps them until it is back.
	MaxStaleness time.Duration
	// Resync, if positive, re-delivers every cached object to the handlers
	// that often (they drop what did not change); zero: never. At least 1s.
	Resync time.Duration

	// Store receives the endpoints. Required.
	Store *registry.Store
	// Logger, or nil to discard logs.
	Logger *slog.Logger
	// Registerer receives the source's metrics, or nil.
	Registerer prometheus.Registerer
}

// ClusterConfig is one cluster reached through a kubeconfig.
type ClusterConfig struct {
	// Name labels the cluster in ids, metrics and logs: a DNS label of at
	// most 20 characters. "" derives it from the kubeconfig file's name
	// (east.yaml → east), else from Context, else from the kubeconfig's
	// current context.
	Name string
	// Kubeconfig is the kubeconfig file; "" uses the default loading rules
	// ($KUBECONFIG, then ~/.kube/config).
	Kubeconfig string
	// Context in the kubeconfig; "" uses its current context.
	Context string
	// Client, if non-nil, is used instead of Kubeconfig and Context (tests,
	// programs that build their own client); Name is then required.
	Client clientset.Interface
}

// normalize validates c, fills defaults and returns the parsed selector.
func (c *Config) normalize() (labels.Selector, error) {
	if c.Store == nil {
		return nil, fmt.Errorf("kubernetes: Config.Store is required")
	}
	if len(c.Clusters) == 0 && !c.InCluster {
		return nil, fmt.Errorf("kubernetes.clusters: no cluster to watch (list clusters or set in_cluster)")
	}
	if c.InClusterName == "" {
		c.InClusterName = DefaultClusterName
	}
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.UnnamedPort == "" {
		c.UnnamedPort = DefaultUnnamedPort
	}
	if c.SyncTimeout == 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
	switch {
	case c.SyncTimeout < 0:
		return nil, fmt.Errorf("kubernetes.sync_timeout: %v, want > 0", c.SyncTimeout)
	case c.MaxStaleness < 0:
		return nil, fmt.Errorf("kubernetes.max_staleness: %v, want >= 0 (0: never drop)", c.MaxStaleness)
	case c.Resync < 0 || c.Resync > 0 && c.Resync < time.Second:
		return nil, fmt.Errorf("kubernetes.resync: %v, want 0 (never) or at least 1s", c.Resync)
	}
	if err := registry.ValidateLabel("kubernetes.unnamed_port", c.UnnamedPort); err != nil {
		return nil, err
	}
	if !strings.Contains(c.ServiceName, "{service}") {
		return nil, fmt.Errorf("kubernetes.service_name: %q must contain {service}", c.ServiceName)
	}
	if err := registry.ValidateService("kubernetes.service_name", renderName(c.ServiceName, "service", "namespace", "cluster")); err != nil {
		return nil, fmt.Errorf("%w (with {service}, {namespace} and {cluster} replaced)", err)
	}
	for i, ns := range c.Namespaces {
		if err := registry.ValidateLabel(fmt.Sprintf("kubernetes.namespaces[%d]", i), ns); err != nil {
			return nil, err
		}
	}
	sel, err := labels.Parse(c.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.label_selector: %q: %w", c.LabelSelector, err)
	}
	return sel, nil
}

// validateClusterName checks a cluster's (possibly derived) name.
func validateClusterName(field, name string) error {
	if err := registry.ValidateLabel(field, name); err != nil {
		return err
	}
	if len(name) > maxClusterName {
		return &registry.FieldError{Field: field, Reason: fmt.Sprintf("%q is %d characters, at most %d", name, len(name), maxClusterName)}
	}
	return nil
}

// deriveName names a cluster from its kubeconfig file or context, as
// ClusterConfig.Name documents; current is the kubeconfig's current context.
func deriveName(c ClusterConfig, current string) string {
	name := deriveFrom(c, current)
	if len(name) > maxClusterName {
		name = strings.TrimRight(name[:maxClusterName], "-")
	}
	return name
}

func deriveFrom(c ClusterConfig, current string) string {
	switch {
	case c.Kubeconfig != "":
		base := filepath.Base(c.Kubeconfig)
		return sanitizeLabel(strings.TrimSuffix(base, filepath.Ext(base)))
	case c.Context != "":
		return sanitizeLabel(c.Context)
	default:
		return sanitizeLabel(current)
	}
}

// renderName fills the service name template.
func renderName(tmpl, service, namespace, cluster string) string {
	r := strings.NewReplacer("{service}", service, "{namespace}", namespace, "{cluster}", cluster)
	return registry.NormalizeService(r.Replace(tmpl))
}
