package main

import (
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	replicatedDir       = "../../deploy/kubernetes-replicated"
	replicatedComponent = "../../deploy/components/replicated"
)

// decodeStrict decodes one manifest of dir into its k8s.io/api type,
// refusing unknown fields.
func decodeStrict(t *testing.T, dir, file string) runtime.Object {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return decodeStrictBytes(t, file, b)
}

// kustomization is the part of a kustomization.yaml the tests check.
type kustomization struct {
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
	Components []string `yaml:"components"`
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	var kz kustomization
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kz); err != nil {
		t.Fatal(err)
	}
	return kz
}

// TestReplicatedManifests checks deploy/kubernetes-replicated: the
// single-replica base plus the Component components/replicated, built as
// kubectl apply -k does: 3 replicas, one per zone, replaced one at a time
// (maxUnavailable 1, maxSurge 0: no zone is free for a surge pod), a
// PodDisruptionBudget keeping 2, and the store's URL and credentials from
// the Secret spillway-store; the server's own parser accepts the args once
// Kubernetes has expanded them.
func TestReplicatedManifests(t *testing.T) {
	if kz := readKustomization(t, replicatedComponent); kz.Kind != "Component" {
		t.Errorf("%s: kind %q, want Component (so that other overlays can add it)", replicatedComponent, kz.Kind)
	}
	if kz := readKustomization(t, replicatedDir); len(kz.Components) != 1 || kz.Components[0] != "../components/replicated" {
		t.Errorf("%s: components %v, want [../components/replicated]", replicatedDir, kz.Components)
	}
	b := build(t, replicatedDir)
	d := b.deploy
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != "RollingUpdate" || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 ||
		ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Errorf("strategy = %+v, want RollingUpdate with maxUnavailable 1, maxSurge 0 (the base's Recreate is for bbolt)", d.Spec.Strategy)
	}
	aa := d.Spec.Template.Spec.Affinity.PodAntiAffinity
	if aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aa.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "topology.kubernetes.io/zone" ||
		aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels["app.kubernetes.io/name"] != "spillway" {
		t.Errorf("anti-affinity = %+v, want one replica per topology.kubernetes.io/zone", aa)
	}

	pdb := b.pdb
	if pdb == nil || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "spillway" {
		t.Fatalf("PodDisruptionBudget = %+v, want minAvailable 2 of app.kubernetes.io/name=spillway", pdb)
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("PodDisruptionBudget selector %s=%s does not match the pod labels %v", k, v, d.Spec.Template.Labels)
		}
	}

	secret := decodeStrict(t, replicatedDir, "secret.example.yaml").(*corev1.Secret)
	args := podArgs(t, b, secret)
	cfg, err := parseConfig(args, os.Stderr)
	if err != nil {
		t.Fatalf("parseConfig(%q): %v", args, err)
	}
	if cfg.Store.URL != secret.StringData["url"] || cfg.Store.Replica.ID != "spillway-7d9f-abcde" || cfg.Store.Etcd.Username != "spillway" {
		t.Errorf("store config = %+v, want the secret's url and user, replica id = pod name", cfg.Store)
	}
}
