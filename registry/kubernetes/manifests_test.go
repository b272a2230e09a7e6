package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/spillway/spillway/registry"
)

const manifestDir = "../../deploy/kubernetes"

// strictDecoder decodes YAML into the registered k8s.io/api type of its
// apiVersion and kind; unknown and repeated fields are errors.
var strictDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// decodeManifests decodes every document of every YAML file in dir but the
// kustomization.
func decodeManifests(t *testing.T, dir string) map[string][]runtime.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	out := map[string][]runtime.Object{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := strictDecoder.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", filepath.Base(f), i, err)
				continue
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], obj)
		}
	}
	return out
}

// TestManifests decodes deploy/kubernetes strictly into k8s.io/api types
// and checks what the manifests promise: the RBAC grants exactly what the
// source uses, the pod runs non-root on a read-only root filesystem with
// probes, and the Service exposes DNS (UDP and TCP) and gRPC.
func TestManifests(t *testing.T) {
	byFile := decodeManifests(t, manifestDir)
	var (
		ns       *corev1.Namespace
		sa       *corev1.ServiceAccount
		role     *rbacv1.ClusterRole
		binding  *rbacv1.ClusterRoleBinding
		cm       *corev1.ConfigMap
		deploy   *appsv1.Deployment
		svc      *corev1.Service
		namesOut []string
	)
	for _, f := range slices.Sorted(maps.Keys(byFile)) {
		for _, obj := range byFile[f] {
			switch o := obj.(type) {
			case *corev1.Namespace:
				ns = o
			case *corev1.ServiceAccount:
				sa = o
			case *rbacv1.ClusterRole:
				role = o
			case *rbacv1.ClusterRoleBinding:
				binding = o
			case *corev1.ConfigMap:
				cm = o
			case *appsv1.Deployment:
				deploy = o
			case *corev1.Service:
				svc = o
			default:
				namesOut = append(namesOut, f)
			}
		}
	}
	if len(namesOut) > 0 {
		t.Errorf("unexpected kinds in %v", namesOut)
	}
	if ns == nil || sa == nil || role == nil || binding == nil || cm == nil || deploy == nil || svc == nil {
		t.Fatalf("missing a manifest: namespace %v, serviceaccount %v, clusterrole %v, binding %v, configmap %v, deployment %v, service %v",
			ns != nil, sa != nil, role != nil, binding != nil, cm != nil, deploy != nil, svc != nil)
	}

	t.Run("kustomization", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(manifestDir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			APIVersion string   `yaml:"apiVersion"`
			Kind       string   `yaml:"kind"`
			Namespace  string   `yaml:"namespace"`
			Resources  []string `yaml:"resources"`
			Images     []struct {
				Name    string `yaml:"name"`
				NewName string `yaml:"newName"`
				NewTag  string `yaml:"newTag"`
			} `yaml:"images"`
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&k); err != nil {
			t.Fatal(err)
		}
		if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || k.Namespace != ns.Name {
			t.Errorf("kustomization = %s %s namespace %q", k.APIVersion, k.Kind, k.Namespace)
		}
		want := slices.Sorted(maps.Keys(byFile))
		if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, want) {
			t.Errorf("kustomization resources = %v, want every manifest once: %v", got, want)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		used := apiCalls(t)
		granted := map[string][]string{} // "group/resource" → verbs
		for i, r := range role.Rules {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Errorf("rule %d: nonResourceURLs %v, resourceNames %v: want neither", i, r.NonResourceURLs, r.ResourceNames)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					granted[g+"/"+res] = append(granted[g+"/"+res], r.Verbs...)
				}
			}
		}
		for gr, verbs := range granted {
			if _, ok := used[gr]; !ok {
				t.Errorf("ClusterRole grants %s, which the source never calls", gr)
			}
			for _, v := range verbs {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("ClusterRole grants %s on %s: want read-only (get, list, watch)", v, gr)
				}
			}
		}
		for gr, verbs := range used {
			for _, v := range verbs {
				if !slices.Contains(granted[gr], v) {
					t.Errorf("the source calls %s on %s, which the ClusterRole does not grant", v, gr)
				}
			}
		}
		if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name ||
			len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" ||
			binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != ns.Name {
			t.Errorf("ClusterRoleBinding %+v does not bind ClusterRole %s to ServiceAccount %s/%s", binding, role.Name, ns.Name, sa.Name)
		}
	})

	t.Run("deployment", func(t *testing.T) {
		spec := deploy.Spec.Template.Spec
		if r := deploy.Spec.Replicas; r == nil || *r != 1 {
			t.Errorf("replicas = %v, want 1 until replicas share state", r)
		}
		if spec.ServiceAccountName != sa.Name {
			t.Errorf("serviceAccountName = %q, want %q", spec.ServiceAccountName, sa.Name)
		}
		if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Error("pod securityContext.runAsNonRoot is not true")
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("%d containers, want 1", len(spec.Containers))
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Fatal("container has no securityContext")
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Error("readOnlyRootFilesystem is not true")
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Error("allowPrivilegeEscalation is not false")
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
			t.Error("capabilities are not all dropped")
		}
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
				t.Errorf("%s probe = %+v, want GET %s", p.name, p.probe, p.path)
			}
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("resources = %+v, want cpu and memory requests and a memory limit", c.Resources)
		}
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
			return v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
		}) {
			t.Errorf("no volume from ConfigMap %s", cm.Name)
		}
		if !slices.Contains(c.Args, "/etc/spillway/spillway.yaml") {
			t.Errorf("args %v do not load the ConfigMap's spillway.yaml", c.Args)
		}
		if _, ok := cm.Data["spillway.yaml"]; !ok {
			t.Errorf("ConfigMap %s has no spillway.yaml", cm.Name)
		}

		// Every Service port reaches a container port of its protocol.
		ports := map[string]corev1.Protocol{}
		for _, p := range c.Ports {
			ports[p.Name] = p.Protocol
		}
		var dnsProtos []corev1.Protocol
		hasGRPC := false
		for _, p := range svc.Spec.Ports {
			proto, ok := ports[p.TargetPort.StrVal]
			if !ok || proto != p.Protocol {
				t.Errorf("Service port %s targets %q/%s: no such container port", p.Name, p.TargetPort.String(), p.Protocol)
			}
			if p.Port == 53 {
				dnsProtos = append(dnsProtos, p.Protocol)
			}
			hasGRPC = hasGRPC || p.Name == "grpc"
		}
		slices.Sort(dnsProtos)
		if !slices.Equal(dnsProtos, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}) || !hasGRPC {
			t.Errorf("Service ports: DNS on %v, grpc %v; want DNS on 53 over TCP and UDP, and grpc", dnsProtos, hasGRPC)
		}
		for k, v := range svc.Spec.Selector {
			if deploy.Spec.Template.Labels[k] != v {
				t.Errorf("Service selector %s=%s does not match the pod labels %v", k, v, deploy.Spec.Template.Labels)
			}
		}
	})
}

// TestStrictDecoderRejectsUnknownFields keeps TestManifests honest.
func TestStrictDecoderRejectsUnknownFields(t *testing.T) {
	doc := "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: 53, protocl: UDP}]\n"
	if _, _, err := strictDecoder.Decode([]byte(doc), nil, nil); err == nil || !strings.Contains(err.Error(), "protocl") {
		t.Errorf("strict decode of a misspelt field = %v, want an error naming it", err)
	}
}

// apiCalls runs a Source against a fake cluster through its first sync and
// a change, and returns the verbs it used by "group/resource".
func apiCalls(t *testing.T) map[string][]string {
	t.Helper()
	f := newFakeCluster("east", node("n1", "r", "z"), eslice("prod", "web", "web-a", v4, grpcPort, ep("web-1", "10.0.0.1", "n1", ready)))
	src, err := New(Config{Clusters: []ClusterConfig{{Name: "east", Client: f.cs}}, Store: registry.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	readyC := make(chan struct{}, 1)
	go func() { done <- src.Run(ctx, readyC) }()
	select {
	case <-readyC:
	case <-time.After(10 * time.Second):
		t.Fatal("no sync")
	}
	f.create(t, eslice("prod", "web", "web-b", v4, grpcPort, ep("web-2", "10.0.0.2", "n1", ready)))
	waitFor(t, "the change", func() bool { return src.Status()[0].Endpoints == 2 })
	cancel()
	<-done
	used := map[string][]string{}
	for _, a := range f.cs.Actions() {
		if a.GetVerb() == "create" { // the test's own
			continue
		}
		gr := a.GetResource().Group + "/" + a.GetResource().Resource
		if !slices.Contains(used[gr], a.GetVerb()) {
			used[gr] = append(used[gr], a.GetVerb())
		}
	}
	return used
}
