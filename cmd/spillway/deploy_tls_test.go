package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

const tlsDir = "../../deploy/kubernetes-tls"

// TestTLSManifests checks deploy/kubernetes-tls: a kustomization over the
// base whose args, once the Secret and the policy ConfigMap are mounted,
// are accepted by the server's own parser with TLS, optional client
// certificates and the policy on; the probes speak HTTPS; and the policy
// file parses strictly and gives the rights its comments promise.
func TestTLSManifests(t *testing.T) {
	checkKustomization(t, tlsDir, "policy.yaml")

	d := decodeStrict(t, tlsDir, "deployment-patch.yaml").(*appsv1.Deployment)
	secret := decodeStrict(t, tlsDir, "secret.example.yaml").(*corev1.Secret)
	policyCM := decodeStrict(t, tlsDir, "policy.yaml").(*corev1.ConfigMap)
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("secret type %q, want %q (what cert-manager writes)", secret.Type, corev1.SecretTypeTLS)
	}
	c := d.Spec.Template.Spec.Containers[0]
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe = %+v, want httpGet scheme HTTPS", name, p)
		}
	}

	// Each mount's files: the Secret's keys, or the ConfigMap's.
	files := map[string]map[string]string{} // mount path -> key -> content
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("mount %s: no volume %s in the patch", m.MountPath, m.Name)
		}
		switch v := d.Spec.Template.Spec.Volumes[i]; {
		case v.Secret != nil && v.Secret.SecretName == secret.Name:
			files[m.MountPath] = secret.StringData
		case v.ConfigMap != nil && v.ConfigMap.Name == policyCM.Name:
			files[m.MountPath] = policyCM.Data
		default:
			t.Errorf("volume %s: want secret %s or configmap %s", v.Name, secret.Name, policyCM.Name)
		}
	}
	dir := t.TempDir()
	var args []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--config=") {
			continue // the base's ConfigMap, tested with the base
		}
		if _, v, ok := strings.Cut(a, "="); ok {
			for mount, keys := range files {
				key, under := strings.CutPrefix(v, mount+"/")
				if !under {
					continue
				}
				content, ok := keys[key]
				if !ok {
					t.Errorf("arg %s: key %q is not in the mounted object", a, key)
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
	cfg, err := parseConfig(args, os.Stderr)
	if err != nil {
		t.Fatalf("parseConfig(%q): %v", args, err)
	}
	if cfg.TLS.Cert == "" || cfg.TLS.Key == "" || cfg.TLS.ClientCA == "" || cfg.TLS.ClientAuth != "optional" || cfg.TLS.MinVersion != "1.3" || cfg.AuthzFile == "" {
		t.Errorf("config: TLS %+v, authz file %q; want cert, key, client CA, optional client auth, TLS 1.3 and a policy", cfg.TLS, cfg.AuthzFile)
	}

	// The policy as the server reads it.
	policy, err := authz.Parse("policy.yaml", []byte(policyCM.Data["policy.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	payments := authn.Identity{Name: "spiffe://cluster.local/ns/payments/sa/payments", Method: authn.Certificate}
	other := authn.Identity{Name: "spiffe://cluster.local/ns/shop/sa/web", Method: authn.Certificate}
	sre := authn.Identity{Name: "spiffe://cluster.local/ns/sre/sa/oncall", Method: authn.Certificate}
	anon := authn.Identity{Method: authn.None}
	replica := authn.Identity{Name: "spillway.spillway.svc", Method: authn.Certificate}
	for _, tc := range []struct {
		id       authn.Identity
		action   authz.Action
		resource string
		allowed  bool
	}{
		{payments, authz.Register, "payments", true},
		{payments, authz.Heartbeat, "payments-canary", true},
		{payments, authz.Register, "checkout", false},
		{payments, authz.XDS, "payments", true},
		{other, authz.XDS, "checkout", true},
		{other, authz.Register, "web", false},
		{sre, authz.Panic, "", true},
		{sre, authz.Config, "payments", true},
		{payments, authz.Panic, "", false},
		{anon, authz.ReadRegistry, "payments", true},
		{anon, authz.XDS, "payments", false},
		{anon, authz.Register, "payments", false},
		{replica, authz.Mesh, "", true},
		{payments, authz.Mesh, "", false},
		{sre, authz.Mesh, "", false},
		{anon, authz.Mesh, "", false},
	} {
		err := policy.Authorize(authn.NewContext(context.Background(), tc.id), tc.action, tc.resource)
		if (err == nil) != tc.allowed {
			t.Errorf("%q %s %s: err = %v, want allowed = %v", tc.id.Name, tc.action, tc.resource, err, tc.allowed)
		}
	}
}
