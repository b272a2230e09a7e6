package exchange

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/replica/exchange/meshv1"
)

// oldSummary is Summary as replicas before an endpoint report's rps, eps
// and latency_ms knew it: mesh.proto with EndpointReport's fields 1 to 6
// only. It is built, not registered, so it may keep the package's names.
func oldSummary(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	fd := protodesc.ToFileDescriptorProto(meshv1.File_mesh_proto)
	found := false
	for _, m := range fd.MessageType {
		if m.GetName() != "EndpointReport" {
			continue
		}
		kept := m.Field[:0]
		for _, f := range m.Field {
			if f.GetNumber() <= 6 {
				kept = append(kept, f)
			}
		}
		m.Field, found = kept, true
	}
	if !found {
		t.Fatal("mesh.proto has no EndpointReport")
	}
	f, err := protodesc.NewFile(fd, new(protoregistry.Files))
	if err != nil {
		t.Fatal(err)
	}
	old := f.Messages().ByName("Summary")
	if old.Fields().Len() == 0 || f.Messages().ByName("EndpointReport").Fields().ByName("rps") != nil {
		t.Fatal("old descriptor still knows rps")
	}
	return old
}

// asOldReplica is what a replica before the rates makes of m: it reads
// what it knows and, sending the same load, encodes only that.
func asOldReplica(t *testing.T, m *meshv1.Summary) []byte {
	t.Helper()
	j, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	old := dynamicpb.NewMessage(oldSummary(t))
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(j, old); err != nil {
		t.Fatal(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withoutRates is s with every endpoint report's rates at 0 (not
// reported).
func withoutRates(s load.Summary) load.Summary {
	out := s
	out.Services = make([]load.ServiceSummary, len(s.Services))
	for i, ss := range s.Services {
		ss.Endpoints = append([]load.EndpointUtilization(nil), ss.Endpoints...)
		for j := range ss.Endpoints {
			ss.Endpoints[j].RPS, ss.Endpoints[j].EPS, ss.Endpoints[j].LatencyMs = 0, 0, 0
		}
		out.Services[i] = ss
	}
	return out
}

// TestEndpointRatesCompat: an endpoint report's rps, eps and latency_ms
// round-trip; a replica of the previous release reads a summary holding
// them and keeps everything else; a summary from it decodes with the
// rates 0 (not reported), exactly what this release reads from a
// summary whose backends report none.
func TestEndpointRatesCompat(t *testing.T) {
	in := goodSummary("replica-1", t0)
	if e := in.Services[0].Endpoints[0]; e.RPS == 0 || e.EPS == 0 || e.LatencyMs == 0 {
		t.Fatalf("goodSummary's first report has no rates: %+v", e)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(ToProto(in))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("round_trip", func(t *testing.T) {
		var m meshv1.Summary
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		e := m.GetServices()[0].GetEndpoints()[0]
		if e.GetRps() != 120.5 || e.GetEps() != 3.25 || e.GetLatencyMs() != 12.75 {
			t.Errorf("wire report = %v, want rps 120.5, eps 3.25, latency_ms 12.75", e)
		}
		got, err := FromProto(&m)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	})

	t.Run("old_reader", func(t *testing.T) {
		old := dynamicpb.NewMessage(oldSummary(t))
		if err := proto.Unmarshal(b, old); err != nil {
			t.Fatalf("a previous-release replica: %v", err)
		}
		svcs := old.Get(old.Descriptor().Fields().ByName("services")).List()
		if svcs.Len() != 2 {
			t.Fatalf("old reader: %d services, want 2", svcs.Len())
		}
		eps := svcs.Get(0).Message().Get(old.Descriptor().Fields().ByName("services").Message().Fields().ByName("endpoints")).List()
		if eps.Len() != 2 {
			t.Fatalf("old reader: %d endpoint reports, want 2", eps.Len())
		}
		e := eps.Get(0).Message()
		fields := e.Descriptor().Fields()
		if got := e.Get(fields.ByName("cpu")).Float(); got != 0.4 {
			t.Errorf("old reader: cpu = %v, want 0.4", got)
		}
		if got := e.Get(fields.ByName("interval_ms")).Int(); got != 1000 {
			t.Errorf("old reader: interval_ms = %v, want 1000", got)
		}
		if got := e.Get(fields.ByName("id")).String(); got != "pay-1" {
			t.Errorf("old reader: id = %q, want pay-1", got)
		}
	})

	t.Run("old_sender", func(t *testing.T) {
		ob := asOldReplica(t, ToProto(in))
		var m meshv1.Summary
		if err := proto.Unmarshal(ob, &m); err != nil {
			t.Fatal(err)
		}
		got, err := FromProto(&m)
		if err != nil {
			t.Fatalf("FromProto of a previous-release summary: %v", err)
		}
		want := withoutRates(in)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("previous-release summary (-want +got):\n%s", diff)
		}
		// This release sends the very same bytes when no backend
		// reports rates: 0 is not on the wire.
		nb, err := proto.MarshalOptions{Deterministic: true}.Marshal(ToProto(want))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(nb, ob) {
			t.Errorf("a summary without rates encodes differently from the previous release's:\n new %x\n old %x", nb, ob)
		}
	})
}

// TestUtilizationRatesReachOwner: over the wire, the owner's merged
// utilization (the planner's UtilizationSource) carries the requests,
// errors and latency a backend reported to another replica; a sender
// whose backends report none (or of the previous release, which sends
// the same bytes) gives 0s.
func TestUtilizationRatesReachOwner(t *testing.T) {
	m := NewMerged(MergedConfig{})
	addr := startServer(t, m)
	route := func(string) (string, string, bool) { return "owner", addr, true }
	rated := func(now time.Time) []load.ServiceSummary {
		return SummarizeWith(nil, nil, map[string][]load.EndpointUtilization{"payments": {
			withRates(report("pay-1", 0.2, 0, 0, now.Add(-100*time.Millisecond), time.Second), 200, 2, 15),
			withRates(report("pay-stuck", 0.05, 0, 0, now.Add(-100*time.Millisecond), time.Second), 180, 72, 900),
		}})
	}
	startSender(t, &Sender{ID: "ra", Interval: testInterval, Route: route, DialOptions: dialInsecure, Local: rated})
	startSender(t, &Sender{
		ID: "rb", Interval: testInterval, Route: route, DialOptions: dialInsecure,
		Local: utilLocal("payments", map[string]time.Duration{"pay-2": 100 * time.Millisecond}, map[string]float64{"pay-2": 0.5}),
	})
	type rates struct{ RPS, EPS, LatencyMs float64 }
	want := map[string]rates{"pay-1": {200, 2, 15}, "pay-stuck": {180, 72, 900}, "pay-2": {}}
	var got map[string]rates
	eventually(t, "the owner holds both senders' reports with their rates", func() bool {
		got = map[string]rates{}
		for _, u := range m.Utilizations("payments", time.Now()) {
			got[u.ID] = rates{u.RPS, u.EPS, u.LatencyMs}
		}
		return cmp.Equal(got, want)
	})
}
