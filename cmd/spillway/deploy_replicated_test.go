package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
)

const replicatedDir = "../../deploy/kubernetes-replicated"

// decodeStrict decodes one manifest of dir into its k8s.io/api type,
// refusing unknown fields.
func decodeStrict(t *testing.T, dir, file string) runtime.Object {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Yaml: true, Strict: true})
	obj, _, err := dec.Decode(b, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return obj
}

// checkKustomization checks that dir's kustomization is the base plus
// extra, patched by deployment-patch.yaml.
func checkKustomization(t *testing.T, dir, extra string) {
	t.Helper()
	var kz struct {
		Resources []string `yaml:"resources"`
		Patches   []struct {
			Path string `yaml:"path"`
		} `yaml:"patches"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kz); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(kz.Resources, "../kubernetes") || !slices.Contains(kz.Resources, extra) || len(kz.Patches) != 1 || kz.Patches[0].Path != "deployment-patch.yaml" {
		t.Errorf("%s kustomization: resources %v, patches %v; want ../kubernetes, %s and deployment-patch.yaml", dir, kz.Resources, kz.Patches, extra)
	}
}

// TestReplicatedManifests checks deploy/kubernetes-replicated: a
// kustomization over the single-replica base with 3 replicas, one per
// zone, a PodDisruptionBudget keeping 2, and the store's URL and
// credentials from the Secret spillway-store; the server's own parser
// accepts the args once Kubernetes has expanded them.
func TestReplicatedManifests(t *testing.T) {
	checkKustomization(t, replicatedDir, "pdb.yaml")

	d := decodeStrict(t, replicatedDir, "deployment-patch.yaml").(*appsv1.Deployment)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("strategy = %q, want RollingUpdate (the base's Recreate is for bbolt)", d.Spec.Strategy.Type)
	}
	aa := d.Spec.Template.Spec.Affinity.PodAntiAffinity
	if aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aa.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "topology.kubernetes.io/zone" ||
		aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels["app.kubernetes.io/name"] != "spillway" {
		t.Errorf("anti-affinity = %+v, want one replica per topology.kubernetes.io/zone", aa)
	}

	pdb := decodeStrict(t, replicatedDir, "pdb.yaml").(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "spillway" {
		t.Errorf("PodDisruptionBudget = %+v, want minAvailable 2 of app.kubernetes.io/name=spillway", pdb.Spec)
	}

	secret := decodeStrict(t, replicatedDir, "secret.example.yaml").(*corev1.Secret)
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{"POD_NAME": "spillway-7d9f-abcde"}
	for _, e := range c.Env {
		if ref := e.ValueFrom.SecretKeyRef; ref != nil {
			if ref.Name != secret.Name {
				t.Errorf("env %s from secret %q, want %q", e.Name, ref.Name, secret.Name)
			}
			v, ok := secret.StringData[ref.Key]
			if !ok {
				t.Errorf("env %s: key %q is not in secret.example.yaml", e.Name, ref.Key)
			}
			env[e.Name] = v
		}
	}
	var mount string
	for _, m := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret.Name {
				mount = m.MountPath
			}
		}
	}
	if mount == "" {
		t.Fatalf("no volume of secret %s mounted", secret.Name)
	}
	// Files the args name under the mount come from the secret's keys.
	dir := t.TempDir()
	expand := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	var args []string
	for _, a := range c.Args {
		a = expand.ReplaceAllStringFunc(a, func(m string) string { return env[m[2:len(m)-1]] })
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, mount+"/") {
			key := strings.TrimPrefix(v, mount+"/")
			if _, ok := secret.StringData[key]; !ok {
				t.Errorf("arg %s: key %q is not in secret.example.yaml", a, key)
			}
			local := filepath.Join(dir, key)
			if err := os.WriteFile(local, []byte(secret.StringData[key]), 0o600); err != nil {
				t.Fatal(err)
			}
			a = strings.Replace(a, v, local, 1)
		}
		if strings.HasPrefix(a, "--config=") {
			continue // the base's ConfigMap, tested with the base
		}
		args = append(args, a)
	}
	cfg, err := parseConfig(args, os.Stderr)
	if err != nil {
		t.Fatalf("parseConfig(%q): %v", args, err)
	}
	if cfg.Store.URL != secret.StringData["url"] || cfg.Store.Replica.ID != env["POD_NAME"] || cfg.Store.Etcd.Username != "spillway" {
		t.Errorf("store config = %+v, want the secret's url and user, replica id = pod name", cfg.Store)
	}
}
