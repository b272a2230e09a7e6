package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

const tlsDir = "../../deploy/kubernetes-tls"

// TestTLSManifests checks deploy/kubernetes-tls: a kustomization over the
// base, built as kubectl apply -k does, whose args (appended to the
// base's by tls-args.yaml), once the Secret and the policy ConfigMap are mounted,
// are accepted by the server's own parser with TLS, optional client
// certificates and the policy on; the probes speak HTTPS; and the policy
// file parses strictly and gives the rights its comments promise.
func TestTLSManifests(t *testing.T) {
	if kz := readKustomization(t, tlsDir); !slices.Contains(kz.Resources, "../kubernetes") || !slices.Contains(kz.Resources, "policy.yaml") {
		t.Errorf("%s: resources %v, want ../kubernetes and policy.yaml", tlsDir, kz.Resources)
	}
	b := build(t, tlsDir)
	secret := decodeStrict(t, tlsDir, "secret.example.yaml").(*corev1.Secret)
	policyCM := decodeStrict(t, tlsDir, "policy.yaml").(*corev1.ConfigMap)
	if diff := cmp.Diff(policyCM.Data, b.configMaps[policyCM.Name].Data); diff != "" {
		t.Errorf("the built policy ConfigMap is not policy.yaml's (-file +built):\n%s", diff)
	}
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("secret type %q, want %q (what cert-manager writes)", secret.Type, corev1.SecretTypeTLS)
	}
	c := b.spillway(t)
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe = %+v, want httpGet scheme HTTPS", name, p)
		}
	}
	args := podArgs(t, b, secret, policyCM)
	cfg, err := parseConfig(args, os.Stderr)
	if err != nil {
		t.Fatalf("parseConfig(%q): %v", args, err)
	}
	if cfg.TLS.Cert == "" || cfg.TLS.Key == "" || cfg.TLS.ClientCA == "" || cfg.TLS.ClientAuth != "optional" || cfg.TLS.MinVersion != "1.3" || cfg.AuthzFile == "" {
		t.Errorf("config: TLS %+v, authz file %q; want cert, key, client CA, optional client auth, TLS 1.3 and a policy", cfg.TLS, cfg.AuthzFile)
	}
	checkReplicaMesh(t, policyCM, secret)

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

// checkReplicaMesh: the policy grants the load exchange (mesh) to the
// replicas' identity, the first DNS SAN of the Secret spillway-tls's
// certificate, which secret.example.yaml says is the Service's name
// spillway.spillway.svc, and to no one else.
func checkReplicaMesh(t *testing.T, policyCM *corev1.ConfigMap, secret *corev1.Secret) {
	t.Helper()
	const identity = "spillway.spillway.svc"
	raw, err := os.ReadFile(filepath.Join(tlsDir, "secret.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if secret.Name != "spillway-tls" || !strings.Contains(string(raw), "dnsNames "+identity) {
		t.Errorf("secret.example.yaml: %s does not tell to put %s first in the certificate's dnsNames", secret.Name, identity)
	}
	policy, err := authz.Parse("policy.yaml", []byte(policyCM.Data["policy.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	for id, allowed := range map[authn.Identity]bool{
		{Name: identity, Method: authn.Certificate}:                                         true,
		{Name: "spiffe://cluster.local/ns/payments/sa/payments", Method: authn.Certificate}: false,
		{Method: authn.None}: false,
	} {
		err := policy.Authorize(authn.NewContext(context.Background(), id), authz.Mesh, "")
		if (err == nil) != allowed {
			t.Errorf("%q mesh: err = %v, want allowed = %v", id.Name, err, allowed)
		}
	}
}
