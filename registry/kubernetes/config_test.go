package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/spillway/spillway/registry"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u1
  user: {token: "t"}
contexts:
- name: prod-east
  context: {cluster: c1, user: u1}
- name: other
  context: {cluster: c1, user: u1}
current-context: prod-east
`

func TestNew(t *testing.T) {
	dir := t.TempDir()
	east := filepath.Join(dir, "east.kubeconfig")
	if err := os.WriteFile(east, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	longName := filepath.Join(dir, "a-very-long-cluster-file-name.yaml")
	if err := os.WriteFile(longName, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	store := registry.NewStore()
	client := fake.NewClientset()
	tests := []struct {
		name      string
		cfg       Config
		wantErr   string
		wantNames []string
	}{
		{name: "kubeconfig_file_names_the_cluster", cfg: Config{Clusters: []ClusterConfig{{Kubeconfig: east}}}, wantNames: []string{"east"}},
		{name: "long_file_name_cut", cfg: Config{Clusters: []ClusterConfig{{Kubeconfig: longName}}}, wantNames: []string{"a-very-long-cluster"}},
		{name: "explicit_names", cfg: Config{Clusters: []ClusterConfig{{Name: "a", Kubeconfig: east}, {Name: "b", Kubeconfig: east, Context: "other"}}}, wantNames: []string{"a", "b"}},
		{name: "client", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}}, wantNames: []string{"t"}},
		{name: "no_cluster", cfg: Config{}, wantErr: "kubernetes.clusters: no cluster"},
		{name: "client_needs_name", cfg: Config{Clusters: []ClusterConfig{{Client: client}}}, wantErr: "kubernetes.clusters[0].name: required"},
		{name: "duplicate_names", cfg: Config{Clusters: []ClusterConfig{{Kubeconfig: east}, {Name: "east", Client: client}}}, wantErr: "kubernetes.clusters[1].name"},
		{name: "bad_name", cfg: Config{Clusters: []ClusterConfig{{Name: "East_1", Client: client}}}, wantErr: "kubernetes.clusters[0].name"},
		{name: "missing_kubeconfig", cfg: Config{Clusters: []ClusterConfig{{Kubeconfig: filepath.Join(dir, "nope")}}}, wantErr: "kubernetes.clusters[0]: kubeconfig"},
		{name: "unknown_context", cfg: Config{Clusters: []ClusterConfig{{Kubeconfig: east, Context: "nope"}}}, wantErr: "context \"nope\""},
		{name: "template_without_service", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, ServiceName: "{namespace}"}, wantErr: "kubernetes.service_name"},
		{name: "template_bad_chars", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, ServiceName: "{service}_x"}, wantErr: "kubernetes.service_name"},
		{name: "bad_selector", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, LabelSelector: "a in (b"}, wantErr: "kubernetes.label_selector"},
		{name: "bad_namespace", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, Namespaces: []string{"Prod"}}, wantErr: "kubernetes.namespaces[0]"},
		{name: "bad_port_name", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, UnnamedPort: "a_b"}, wantErr: "kubernetes.unnamed_port"},
		{name: "negative_staleness", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, MaxStaleness: -time.Second}, wantErr: "kubernetes.max_staleness"},
		{name: "negative_sync_timeout", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, SyncTimeout: -time.Second}, wantErr: "kubernetes.sync_timeout"},
		{name: "tiny_resync", cfg: Config{Clusters: []ClusterConfig{{Name: "t", Client: client}}, Resync: time.Millisecond}, wantErr: "kubernetes.resync"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Store = store
			src, err := New(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			var names []string
			for _, st := range src.Status() {
				names = append(names, st.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.wantNames, ",") {
				t.Errorf("clusters = %v, want %v", names, tt.wantNames)
			}
		})
	}
}

func TestNewNeedsStore(t *testing.T) {
	if _, err := New(Config{InCluster: true}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Errorf("New without a store = %v, want an error naming Store", err)
	}
}

func TestInClusterOutsideACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := New(Config{InCluster: true, Store: registry.NewStore()})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.in_cluster") {
		t.Errorf("New(in_cluster) outside a pod = %v, want an error naming kubernetes.in_cluster", err)
	}
}
