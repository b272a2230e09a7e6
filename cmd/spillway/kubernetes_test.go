package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

func TestKubernetesConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "spillway.yaml")
	if err := os.WriteFile(file, []byte(`kubernetes:
  clusters:
    - {name: east, kubeconfig: /etc/k/east.yaml, context: prod}
    - {kubeconfig: /etc/k/west.yaml}
  namespaces: [prod]
  label_selector: spillway.io/export=true
  sync_timeout: 10s
  max_staleness: 5m
`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kubernetes:\n  clusters: [{name: East_1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		want    KubernetesConfig
		wantErr string
	}{
		{name: "off_by_default", args: nil, want: KubernetesConfig{}},
		{name: "file", args: []string{"--config", file}, want: KubernetesConfig{
			Clusters:   []KubernetesCluster{{Name: "east", Kubeconfig: "/etc/k/east.yaml", Context: "prod"}, {Kubeconfig: "/etc/k/west.yaml"}},
			Namespaces: []string{"prod"}, LabelSelector: "spillway.io/export=true", SyncTimeout: 10 * time.Second, MaxStaleness: 5 * time.Minute,
		}},
		{name: "flags_replace_the_clusters", args: []string{"--config", file, "--kubeconfig", "a.yaml", "--kubeconfig", "/x/b.yaml"}, want: KubernetesConfig{
			Clusters:   []KubernetesCluster{{Kubeconfig: "a.yaml"}, {Kubeconfig: "/x/b.yaml"}},
			Namespaces: []string{"prod"}, LabelSelector: "spillway.io/export=true", SyncTimeout: 10 * time.Second, MaxStaleness: 5 * time.Minute,
		}},
		{name: "bad_cluster_name", args: []string{"--config", bad}, wantErr: "kubernetes.clusters[0].name"},
		{name: "empty_kubeconfig", args: []string{"--kubeconfig", ""}, wantErr: "kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseConfig(%q) = %v, want an error naming %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.Kubernetes); diff != "" {
				t.Errorf("kubernetes config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDeployConfigMap: the config file shipped in deploy/kubernetes is one
// the server accepts, with the Kubernetes source on.
func TestDeployConfigMap(t *testing.T) {
	data, err := os.ReadFile("../../deploy/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(file, []byte(cm.Data["spillway.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"--config", file}, io.Discard)
	if err != nil {
		t.Fatalf("the ConfigMap's spillway.yaml: %v", err)
	}
	if !c.Kubernetes.InCluster || c.DataDir != "/var/lib/spillway" {
		t.Errorf("config = %+v, want in_cluster and the data volume", c)
	}
}

// TestRunWithUnreachableCluster: a cluster that cannot be reached at start
// holds the server back only for kubernetes.sync_timeout; then everything
// is served and /readyz names the cluster as stale.
func TestRunWithUnreachableCluster(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "dead.yaml")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "spillway.yaml")
	if err := os.WriteFile(cfgFile, []byte("kubernetes:\n  sync_timeout: 300ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig([]string{"--config", cfgFile, "--kubeconfig", kubeconfig, "--data-dir", "",
		"--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &addrLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v", err)
		}
	}()
	var httpAddr string
	for httpAddr == "" {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("server not serving after 20s; logs:\n%s", logs)
		}
		httpAddr = logs.httpAddr()
		time.Sleep(time.Millisecond)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("serving after %v, before the 300ms sync timeout", d)
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "kubernetes cluster dead: STALE") {
		t.Errorf("/readyz = %d %q, want 200 naming cluster dead as stale", resp.StatusCode, body)
	}
}

// addrLog collects the server's log and finds the HTTP address in it.
type addrLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *addrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *addrLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *addrLog) httpAddr() string {
	for _, line := range strings.Split(l.String(), "\n") {
		if !strings.Contains(line, `msg="spillway serving"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "http="); ok {
				return v
			}
		}
	}
	return ""
}

// TestReadmeKubernetesConfig: the kubernetes block in the README's "Run in
// Kubernetes" section is a config the server accepts.
func TestReadmeKubernetesConfig(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Run in Kubernetes")
	if !ok {
		t.Fatal(`README has no "## Run in Kubernetes" section`)
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal("no yaml block in the section")
	}
	block, _, _ = strings.Cut(block, "```")
	file := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(file, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"--config", file}, io.Discard)
	if err != nil {
		t.Fatalf("README's kubernetes block: %v", err)
	}
	if len(c.Kubernetes.Clusters) != 2 || c.Kubernetes.SyncTimeout != 30*time.Second {
		t.Errorf("README's kubernetes block = %+v", c.Kubernetes)
	}
}
