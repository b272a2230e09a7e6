package xds

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// encode writes the response field, the Any and the value into one buffer
// by hand. Its bytes must be what proto.Marshal gives for the same Any, or
// the versions (hashes of the bytes) and the clients' decoding would differ.
func TestEncodeIsProtoMarshal(t *testing.T) {
	tests := []struct {
		name string
		m    proto.Message
	}{
		{"listener", baseLDS(t)},
		{"route", route("web")},
		{"cluster", cluster("web")},
		{"cluster load assignment", baseEDS(t)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := encode("web", tt.m)
			if err != nil {
				t.Fatal(err)
			}
			det := proto.MarshalOptions{Deterministic: true}
			value, err := det.Marshal(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			a, err := anypb.New(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			a.Value = value
			want, err := det.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.raw, want) {
				t.Fatalf("raw Any:\n got %x\nwant %x", r.raw, want)
			}
			if r.any.GetTypeUrl() != a.GetTypeUrl() || !bytes.Equal(r.any.GetValue(), value) {
				t.Errorf("Any = %s, %d bytes; want %s, %d bytes", r.any.GetTypeUrl(), len(r.any.GetValue()), a.GetTypeUrl(), len(value))
			}
			field := protowire.AppendTag(nil, fieldResources, protowire.BytesType)
			field = protowire.AppendBytes(field, want)
			if got := r.field.ReadOnlyData(); !bytes.Equal(got, field) {
				t.Errorf("response field:\n got %x\nwant %x", got, field)
			}
			back := tt.m.ProtoReflect().New().Interface()
			if err := r.any.UnmarshalTo(back); err != nil || !proto.Equal(back, tt.m) {
				t.Errorf("the Any does not decode to the message (err %v)", err)
			}
			if r.version != hashHex(want) {
				t.Errorf("version %s, want the hash of the bytes %s", r.version, hashHex(want))
			}
		})
	}
}
