package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	baseDir          = "../../deploy/kubernetes"
	replicatedTLSDir = "../../deploy/kubernetes-replicated-tls"
)

// built is what `kubectl apply -k dir` would apply: dir built with the
// kustomize library kubectl embeds, each resource decoded strictly into
// its k8s.io/api type.
type built struct {
	objects    []string // kind/name, in build order
	deploy     *appsv1.Deployment
	pdb        *policyv1.PodDisruptionBudget // or nil
	configMaps map[string]*corev1.ConfigMap
}

func build(t *testing.T, dir string) built {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy // kubectl's order: namespaces first
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b := built{configMaps: map[string]*corev1.ConfigMap{}}
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj := decodeStrictBytes(t, dir+": "+r.CurId().String(), y)
		b.objects = append(b.objects, r.GetKind()+"/"+r.GetName())
		if r.GetNamespace() != "" && r.GetNamespace() != "spillway" {
			t.Errorf("%s: %s in namespace %q, want spillway", dir, r.CurId(), r.GetNamespace())
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			b.deploy = o
		case *policyv1.PodDisruptionBudget:
			b.pdb = o
		case *corev1.ConfigMap:
			b.configMaps[o.Name] = o
		}
	}
	if b.deploy == nil {
		t.Fatalf("kustomize build %s: no Deployment", dir)
	}
	return b
}

func decodeStrictBytes(t *testing.T, what string, b []byte) runtime.Object {
	t.Helper()
	dec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Yaml: true, Strict: true})
	obj, _, err := dec.Decode(b, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return obj
}

// spillway returns the Deployment's spillway container.
func (b built) spillway(t *testing.T) corev1.Container {
	t.Helper()
	cs := b.deploy.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "spillway" {
		t.Fatalf("containers %v, want one named spillway (the JSON patches append to containers/0)", cs)
	}
	return cs[0]
}

// podArgs returns the spillway container's args as the server gets them
// in the pod: $(VAR) expanded from the container's env (Secret keys from
// sources, the pod name a made-up one), every file an arg names under a
// mount of one of sources (a Secret's stringData, a ConfigMap's data)
// written to a temporary directory and named there, and the base's
// --config left out (its ConfigMap is tested with the base). An arg that
// names a key the mounted object lacks fails the test.
func podArgs(t *testing.T, b built, sources ...runtime.Object) []string {
	t.Helper()
	c := b.spillway(t)
	secrets, cms := map[string]map[string]string{}, map[string]map[string]string{}
	for _, s := range sources {
		switch o := s.(type) {
		case *corev1.Secret:
			secrets[o.Name] = o.StringData
		case *corev1.ConfigMap:
			cms[o.Name] = o.Data
		default:
			t.Fatalf("source %T: want a Secret or a ConfigMap", s)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			keys, ok := secrets[ref.Name]
			if !ok {
				t.Fatalf("env %s from secret %q, which is none of the example secrets", e.Name, ref.Name)
			}
			v, ok := keys[ref.Key]
			if !ok {
				t.Errorf("env %s: key %q is not in the example secret %s", e.Name, ref.Key, ref.Name)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = "spillway-7d9f-abcde"
		}
	}
	files := map[string]map[string]string{} // mount path -> key -> content
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(b.deploy.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("mount %s: no volume %s", m.MountPath, m.Name)
		}
		switch v := b.deploy.Spec.Template.Spec.Volumes[i]; {
		case v.Secret != nil && secrets[v.Secret.SecretName] != nil:
			files[m.MountPath] = secrets[v.Secret.SecretName]
		case v.ConfigMap != nil && cms[v.ConfigMap.Name] != nil:
			files[m.MountPath] = cms[v.ConfigMap.Name]
		}
	}
	dir := t.TempDir()
	expand := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	var args []string
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		if a == "--config" {
			i++ // and its value
			continue
		}
		if strings.HasPrefix(a, "--config=") {
			continue
		}
		a = expand.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := env[m[2:len(m)-1]]
			if !ok {
				t.Errorf("arg %s: no env %s", c.Args[i], m)
			}
			return v
		})
		if _, v, ok := strings.Cut(a, "="); ok {
			for mount, keys := range files {
				key, under := strings.CutPrefix(v, mount+"/")
				if !under {
					continue
				}
				content, ok := keys[key]
				if !ok {
					t.Errorf("arg %s: key %q is not in the object mounted at %s", a, key, mount)
				}
				local := filepath.Join(dir, strings.ReplaceAll(mount, "/", "_")+"_"+key)
				if err := os.WriteFile(local, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				a = strings.Replace(a, v, local, 1)
			}
		}
		args = append(args, a)
	}
	return args
}

var (
	baseObjects = []string{
		"Namespace/spillway", "ServiceAccount/spillway", "ClusterRole/spillway", "ClusterRoleBinding/spillway",
		"ConfigMap/spillway-config", "Service/spillway", "Deployment/spillway",
	}
	baseArgs  = []string{"--config", "/etc/spillway/spillway.yaml"}
	storeArgs = []string{
		"--store=$(SPILLWAY_STORE)", "--replica-id=$(POD_NAME)", "--etcd-username=$(ETCD_USERNAME)",
		"--etcd-password-file=/etc/spillway-store/password", "--etcd-ca=/etc/spillway-store/ca.pem",
	}
	tlsArgs = []string{
		"--tls-cert=/etc/spillway-tls/tls.crt", "--tls-key=/etc/spillway-tls/tls.key", "--client-ca=/etc/spillway-tls/ca.crt",
		"--client-auth=optional", "--tls-min-version=1.3", "--authz-file=/etc/spillway-policy/policy.yaml",
	}
)

// TestOverlaysBuild builds every overlay of deploy/ as kubectl apply -k
// would and checks what each applies: the objects, the replicas and their
// update strategy, the args (the components append theirs, so they
// compose), the probes' scheme. The base, kubernetes-replicated and
// kubernetes-tls build to what they did before the components (the args
// aside: the base's --config now stays as the base writes it).
func TestOverlaysBuild(t *testing.T) {
	tests := []struct {
		dir      string
		objects  []string // in kubectl's order (by kind)
		replicas int32
		strategy appsv1.DeploymentStrategyType
		args     []string
		scheme   corev1.URIScheme
	}{
		{baseDir, baseObjects, 1, appsv1.RecreateDeploymentStrategyType, baseArgs, corev1.URISchemeHTTP},
		{replicatedDir, append(slices.Clone(baseObjects), "PodDisruptionBudget/spillway"),
			3, appsv1.RollingUpdateDeploymentStrategyType, concat(baseArgs, storeArgs), corev1.URISchemeHTTP},
		{tlsDir, insertAfter(baseObjects, "ConfigMap/spillway-config", "ConfigMap/spillway-policy"),
			1, appsv1.RecreateDeploymentStrategyType, concat(baseArgs, tlsArgs), corev1.URISchemeHTTPS},
		{replicatedTLSDir, append(insertAfter(baseObjects, "ConfigMap/spillway-config", "ConfigMap/spillway-policy"), "PodDisruptionBudget/spillway"),
			3, appsv1.RollingUpdateDeploymentStrategyType, concat(baseArgs, tlsArgs, storeArgs), corev1.URISchemeHTTPS},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
			b := build(t, tt.dir)
			if diff := cmp.Diff(tt.objects, b.objects); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			d := b.deploy
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tt.replicas {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, tt.replicas)
			}
			if d.Spec.Strategy.Type != tt.strategy {
				t.Errorf("strategy = %q, want %q", d.Spec.Strategy.Type, tt.strategy)
			}
			c := b.spillway(t)
			if diff := cmp.Diff(tt.args, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != tt.scheme && !(tt.scheme == corev1.URISchemeHTTP && p.HTTPGet.Scheme == "") {
					t.Errorf("%s probe = %+v, want httpGet scheme %s", name, p, tt.scheme)
				}
			}
			if (b.pdb != nil) != (tt.replicas > 1) {
				t.Errorf("PodDisruptionBudget %v with %d replicas: want one exactly with replicas", b.pdb, tt.replicas)
			}
		})
	}
}

// TestReplicatedTLSManifests checks deploy/kubernetes-replicated-tls: it
// is kubernetes-tls with everything kubernetes-replicated adds to the
// base (the component ../components/replicated), nothing lost on either
// side: 3 replicas one per zone, the rolling update, the
// PodDisruptionBudget, the store's env, mount and flags, and the TLS
// flags, mounts, HTTPS probes and the policy. The server's own parser
// accepts the args once the Secrets and the policy are mounted, with TLS
// and the etcd store both on, and the policy grants the replicas' identity
// the load exchange.
func TestReplicatedTLSManifests(t *testing.T) {
	b := build(t, replicatedTLSDir)
	tls, repl, base := build(t, tlsDir), build(t, replicatedDir), build(t, baseDir)
	d, c := b.deploy, b.spillway(t)

	// The replicated part, as kubernetes-replicated has it.
	if diff := cmp.Diff(repl.deploy.Spec.Strategy, d.Spec.Strategy); diff != "" {
		t.Errorf("strategy (-kubernetes-replicated +combined):\n%s", diff)
	}
	if diff := cmp.Diff(repl.deploy.Spec.Template.Spec.Affinity, d.Spec.Template.Spec.Affinity); diff != "" {
		t.Errorf("affinity (-kubernetes-replicated +combined):\n%s", diff)
	}
	if diff := cmp.Diff(repl.pdb, b.pdb); diff != "" {
		t.Errorf("PodDisruptionBudget (-kubernetes-replicated +combined):\n%s", diff)
	}
	// The TLS part, as kubernetes-tls has it.
	if diff := cmp.Diff(tls.configMaps["spillway-policy"], b.configMaps["spillway-policy"]); diff != "" {
		t.Errorf("policy ConfigMap (-kubernetes-tls +combined):\n%s", diff)
	}
	tlsC := tls.spillway(t)
	for name, p := range map[string][2]*corev1.Probe{
		"startup":   {tlsC.StartupProbe, c.StartupProbe},
		"liveness":  {tlsC.LivenessProbe, c.LivenessProbe},
		"readiness": {tlsC.ReadinessProbe, c.ReadinessProbe},
	} {
		if diff := cmp.Diff(p[0], p[1]); diff != "" {
			t.Errorf("%s probe (-kubernetes-tls +combined):\n%s", name, diff)
		}
	}
	// Both: what each adds to the base, TLS first.
	baseC, replC := base.spillway(t), repl.spillway(t)
	if want := concat(tlsC.Args, replC.Args[len(baseC.Args):]); !slices.Equal(c.Args, want) {
		t.Errorf("args = %q, want kubernetes-tls's then kubernetes-replicated's additions %q", c.Args, want)
	}
	names := func(l []string) []string { slices.Sort(l); return slices.Compact(l) }
	var wantVolumes, gotVolumes, wantMounts, gotMounts, wantEnv, gotEnv []string
	for _, v := range concat(tls.deploy.Spec.Template.Spec.Volumes, repl.deploy.Spec.Template.Spec.Volumes) {
		wantVolumes = append(wantVolumes, v.Name)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		gotVolumes = append(gotVolumes, v.Name)
	}
	for _, m := range concat(tlsC.VolumeMounts, replC.VolumeMounts) {
		wantMounts = append(wantMounts, m.Name+"@"+m.MountPath)
	}
	for _, m := range c.VolumeMounts {
		gotMounts = append(gotMounts, m.Name+"@"+m.MountPath)
	}
	for _, e := range concat(tlsC.Env, replC.Env) {
		wantEnv = append(wantEnv, e.Name)
	}
	for _, e := range c.Env {
		gotEnv = append(gotEnv, e.Name)
	}
	for what, l := range map[string][2][]string{
		"volumes": {names(wantVolumes), names(gotVolumes)},
		"mounts":  {names(wantMounts), names(gotMounts)},
		"env":     {names(wantEnv), names(gotEnv)},
	} {
		if diff := cmp.Diff(l[0], l[1]); diff != "" {
			t.Errorf("%s (-both overlays' +combined):\n%s", what, diff)
		}
	}

	// The server's own parser, with both Secrets and the policy mounted.
	store := decodeStrict(t, replicatedDir, "secret.example.yaml").(*corev1.Secret)
	tlsSecret := decodeStrict(t, tlsDir, "secret.example.yaml").(*corev1.Secret)
	args := podArgs(t, b, store, tlsSecret, b.configMaps["spillway-policy"])
	cfg, err := parseConfig(args, os.Stderr)
	if err != nil {
		t.Fatalf("parseConfig(%q): %v", args, err)
	}
	if cfg.Store.URL != store.StringData["url"] || cfg.Store.Replica.ID != "spillway-7d9f-abcde" || cfg.Store.Etcd.Username != "spillway" {
		t.Errorf("store config = %+v, want the secret's url and user, replica id = pod name", cfg.Store)
	}
	if cfg.TLS.Cert == "" || cfg.TLS.Key == "" || cfg.TLS.ClientCA == "" || cfg.TLS.ClientAuth != "optional" || cfg.AuthzFile == "" {
		t.Errorf("config: TLS %+v, authz file %q; want cert, key, client CA, optional client auth and a policy", cfg.TLS, cfg.AuthzFile)
	}
	checkReplicaMesh(t, b.configMaps["spillway-policy"], tlsSecret)
}

func concat[T any](lists ...[]T) []T {
	var out []T
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func insertAfter(list []string, after, s string) []string {
	i := slices.Index(list, after)
	return slices.Insert(slices.Clone(list), i+1, s)
}
