package registryv1

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// oldReport is UtilizationReport as servers before rps, eps and
// latency_ms knew it: this descriptor without fields 8 to 10.
func oldReport(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	fd := protodesc.ToFileDescriptorProto(File_registry_proto)
	for _, m := range fd.MessageType {
		if m.GetName() == "UtilizationReport" {
			var kept []*descriptorpb.FieldDescriptorProto
			for _, f := range m.Field {
				if f.GetNumber() <= 7 {
					kept = append(kept, f)
				}
			}
			m.Field = kept
			fd.MessageType = []*descriptorpb.DescriptorProto{m}
			break
		}
	}
	fd.Service, fd.Dependency = nil, nil
	fd.Name = proto.String("registry_old.proto")
	fd.Package = proto.String("spillway.registry.v1old")
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().ByName("UtilizationReport")
}

// TestUtilizationReportCompat: the optional fields round-trip; an old
// reader ignores them and keeps the rest; a report without them reads 0
// (not reported).
func TestUtilizationReportCompat(t *testing.T) {
	in := &UtilizationReport{Service: "web", EndpointId: "web-1", Cpu: 0.25, InFlight: 3, Limit: 64, IntervalMs: 1000,
		Rps: 120.5, Eps: 3.25, LatencyMs: 12.75}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var back UtilizationReport
	if err := proto.Unmarshal(b, &back); err != nil || !proto.Equal(in, &back) {
		t.Fatalf("round trip = %v, %v; want %v", &back, err, in)
	}
	old := dynamicpb.NewMessage(oldReport(t))
	if err := proto.Unmarshal(b, old); err != nil {
		t.Fatalf("an old reader: %v", err)
	}
	if got := old.Get(old.Descriptor().Fields().ByName("cpu")).Float(); got != 0.25 {
		t.Errorf("old reader: cpu = %v, want 0.25", got)
	}
	if got := old.Get(old.Descriptor().Fields().ByName("interval_ms")).Uint(); got != 1000 {
		t.Errorf("old reader: interval_ms = %v, want 1000", got)
	}
	// What an old sender sends: no fields 8 to 10.
	oldMsg := dynamicpb.NewMessage(oldReport(t))
	oldMsg.Set(oldMsg.Descriptor().Fields().ByName("cpu"), protoreflect.ValueOfFloat64(0.5))
	ob, err := proto.Marshal(oldMsg)
	if err != nil {
		t.Fatal(err)
	}
	var fromOld UtilizationReport
	if err := proto.Unmarshal(ob, &fromOld); err != nil || fromOld.GetRps() != 0 || fromOld.GetEps() != 0 || fromOld.GetLatencyMs() != 0 || fromOld.GetCpu() != 0.5 {
		t.Errorf("an old sender's report = %v, %v; want cpu 0.5 and rps, eps, latency_ms 0", &fromOld, err)
	}
	// JSON names, as the HTTP API takes them.
	j, err := protojson.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON UtilizationReport
	if err := protojson.Unmarshal([]byte(`{"service":"web","rps":120.5,"eps":3.25,"latency_ms":12.75}`), &fromJSON); err != nil || fromJSON.Rps != 120.5 || fromJSON.Eps != 3.25 || fromJSON.LatencyMs != 12.75 {
		t.Errorf("JSON with rps, eps, latency_ms = %v, %v (marshalled: %s)", &fromJSON, err, j)
	}
}
