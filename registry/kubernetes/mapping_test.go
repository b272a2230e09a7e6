package kubernetes

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/spillway/spillway/registry"
)

func TestHealth(t *testing.T) {
	T, F := ptr(true), ptr(false)
	tests := []struct {
		name                        string
		ready, serving, terminating *bool
		want                        registry.Health
		ok                          bool
	}{
		{"ready", T, T, F, registry.Healthy, true},
		{"all_nil_means_ready", nil, nil, nil, registry.Healthy, true},
		{"not_ready", F, F, F, "", false},
		{"not_ready_serving_nil", F, nil, nil, "", false},
		{"terminating_serving", F, T, T, registry.Draining, true},
		{"terminating_not_serving", F, F, T, "", false},
		{"publish_not_ready_terminating", T, T, T, registry.Draining, true},
		{"publish_not_ready_terminating_not_serving", T, F, T, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := health(discoveryv1.EndpointConditions{Ready: tt.ready, Serving: tt.serving, Terminating: tt.terminating})
			if h != tt.want || ok != tt.ok {
				t.Errorf("health = %q, %v, want %q, %v", h, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestEndpointIDs(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		name    string
		cluster string
		ep      discoveryv1.Endpoint
		at      discoveryv1.AddressType
		want    string
	}{
		{"pod", "", ep("web-7d4f9-x2x9z", "10.0.0.1", "", ready), v4, "web-7d4f9-x2x9z"},
		{"pod_with_cluster", "east", ep("web-1", "10.0.0.1", "", ready), v4, "web-1-east"},
		{"pod_v6", "east", ep("web-1", "2001:db8::1", "", ready), v6, "web-1-v6-east"},
		{"pod_name_with_dots", "", ep("Web.v2_1", "10.0.0.1", "", ready), v4, "web-v2-1"},
		{"hostname", "", discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Hostname: ptr("db-0")}, v4, "db-0"},
		{"address", "", discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}}, v4, "10-0-0-1-8080"},
		{"address_v6_cluster", "west", discoveryv1.Endpoint{Addresses: []string{"2001:db8::1"}}, v6, "2001-db8--1-8080-west"},
		{"long_pod", "east", ep(long, "10.0.0.1", "", ready), v4, strings.Repeat("a", 49) + "-5904740b-east"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &mapper{cluster: tt.cluster, unnamedPort: "grpc"}
			eps, _ := m.endpoints([]*discoveryv1.EndpointSlice{eslice("ns", "svc", "s", tt.at, grpcPort, tt.ep)})
			if len(eps) != 1 {
				t.Fatalf("endpoints = %v, want 1", eps)
			}
			if eps[0].ID != tt.want {
				t.Errorf("id = %q, want %q", eps[0].ID, tt.want)
			}
			if err := registry.ValidateLabel("id", eps[0].ID); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestEndpointsMerge(t *testing.T) {
	m := &mapper{unnamedPort: "grpc", node: func(name string) *corev1.Node {
		if name == "n1" {
			return node("n1", "Region-1", "bad zone!")
		}
		return nil
	}}
	a := eslice("ns", "svc", "a", v4, grpcPort, ep("p-1", "10.0.0.1", "n1", draining), ep("p-2", "10.0.0.2", "", ready))
	b := eslice("ns", "svc", "b", v4, []discoveryv1.EndpointPort{port("admin", 9000, corev1.ProtocolTCP)},
		ep("p-1", "10.0.0.1", "n1", ready), // the same pod, moving between slices
		ep("p-2", "10.0.0.9", "", ready),   // another address under the same name
		discoveryv1.Endpoint{Addresses: []string{"not-an-ip"}},
		discoveryv1.Endpoint{Addresses: []string{"2001:db8::1"}}, // v6 in a v4 slice
	)
	noPorts := eslice("ns", "svc", "c", v4, []discoveryv1.EndpointPort{port("sctp", 1, corev1.ProtocolSCTP)}, ep("p-3", "10.0.0.3", "", ready))
	eps, sk := m.endpoints([]*discoveryv1.EndpointSlice{b, noPorts, a})
	var got []view
	for _, e := range eps {
		got = append(got, viewOf(e))
	}
	want := []view{
		{"10-0-0-9-9000", "10.0.0.9", "admin=9000/tcp", "", "", registry.Healthy},
		{"p-1", "10.0.0.1", "admin=9000/tcp,grpc=8080/tcp", "", "region-1", registry.Healthy},
		{"p-2", "10.0.0.2", "grpc=8080/tcp", "", "", registry.Healthy},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	if want := (skip{badAddress: 2, noPorts: 1}); sk != want {
		t.Errorf("skipped = %+v, want %+v", sk, want)
	}
}

func TestPorts(t *testing.T) {
	m := &mapper{unnamedPort: "main"}
	got := m.ports([]discoveryv1.EndpointPort{
		port("metrics", 9090, ""),
		port("", 8080, corev1.ProtocolTCP),
		port("dns", 53, corev1.ProtocolUDP),
		port("sctp", 7, corev1.ProtocolSCTP),
		{Name: ptr("all")}, // no number: all ports
		port("Admin", 9000, corev1.ProtocolTCP),
	})
	want := []registry.Port{
		{Name: "admin", Number: 9000, Protocol: registry.TCP},
		{Name: "dns", Number: 53, Protocol: registry.UDP},
		{Name: "main", Number: 8080, Protocol: registry.TCP},
		{Name: "metrics", Number: 9090, Protocol: registry.TCP},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
}

// TestSlimSlice: the transform keeps what the mapping reads, drops the
// rest, leaves its input alone and is idempotent.
func TestSlimSlice(t *testing.T) {
	full := eslice("prod", "web", "web-abc", v4, []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr(int32(8080)), AppProtocol: ptr("kubernetes.io/h2c")}},
		withZone(ep("web-1", "10.0.0.1", "n1", ready), "z"))
	full.ResourceVersion = "42"
	full.Annotations = map[string]string{"a": "b"}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}
	full.Endpoints[0].Addresses = append(full.Endpoints[0].Addresses, "10.0.0.2")
	full.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}}
	orig := full.DeepCopy()

	slim := slimSlice(labels.Everything(), &interner{})
	got1, _ := slim(full)
	got2, _ := slim(got1)
	s := got1.(*discoveryv1.EndpointSlice)
	want := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abc", Namespace: "prod", ResourceVersion: "42", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: v4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			Hostname:   ptr("web-1"), // the pod name
			NodeName:   ptr("n1"),
			Zone:       ptr("z"),
		}},
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("slim (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(s, got2.(*discoveryv1.EndpointSlice)); diff != "" {
		t.Errorf("slim is not idempotent (-once +twice):\n%s", diff)
	}
	if diff := cmp.Diff(orig, full); diff != "" {
		t.Errorf("slim modified its input (-before +after):\n%s", diff)
	}
	if !sameSlice(s, got2.(*discoveryv1.EndpointSlice)) {
		t.Error("sameSlice(slim, slim(slim)) = false")
	}

	unmatched, _ := slimSlice(labels.SelectorFromSet(labels.Set{"export": "yes"}), &interner{})(full)
	if k := serviceKey(unmatched.(*discoveryv1.EndpointSlice)); k != "" {
		t.Errorf("a slice the selector does not match has service key %q, want none", k)
	}
}

func TestFitLabel(t *testing.T) {
	a, b := strings.Repeat("x", 80)+"1", strings.Repeat("x", 80)+"2"
	fa, fb := fitLabel(a, "-east"), fitLabel(b, "-east")
	if fa == fb || len(fa) != 63 || !strings.HasSuffix(fa, "-east") {
		t.Errorf("fitLabel = %q, %q: want distinct 63-character labels ending -east", fa, fb)
	}
	for _, l := range []string{fa, fb} {
		if err := registry.ValidateLabel("id", l); err != nil {
			t.Error(err)
		}
	}
}

func TestInternerSweeps(t *testing.T) {
	var in interner
	a := in.intern(ptr("node-a"))
	if b := in.intern(ptr("node-a")); a != b {
		t.Error("intern gave two pointers for one name")
	}
	for i := range 5000 {
		in.intern(ptr(fmt.Sprintf("node-%d", i))) // dropped at once
		if i%1000 == 0 {
			runtime.GC()
		}
	}
	runtime.GC()
	in.intern(ptr("last"))
	if n := len(in.m); n > 2100 {
		t.Errorf("interner holds %d names after churn, want dead ones swept", n)
	}
	if c := in.intern(ptr("node-a")); c != a {
		t.Error("a live name lost its pointer")
	}
	runtime.KeepAlive(a)
}
