package xds

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec we delegate to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// resource is one encoded resource, shared by every stream that gets the
// same content: it is marshaled once, when its content changes, not once
// per stream.
type resource struct {
	name    string
	version string     // hash of raw
	any     *anypb.Any // for the delta path
	raw     []byte     // the Any, marshaled
	// field is raw framed as DiscoveryResponse.resources (tag, length,
	// raw), ready to go out as one buffer of a response.
	field mem.Buffer
}

// FNV-1a, 64 bits, over strings without converting them to []byte.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func hashHex(b ...[]byte) string {
	h := fnv.New64a()
	for _, x := range b {
		h.Write(x)
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// rawResponse is a DiscoveryResponse assembled from pre-marshaled
// resources. The codec writes it as a list of buffers: a few bytes of
// framing per stream, then the shared bytes of each resource.
type rawResponse struct {
	bufs  mem.BufferSlice
	small [2]mem.Buffer // bufs' backing for one resource
	head  mem.SliceBuffer
	room  [128]byte // head's backing when it fits
}

// Field numbers of envoy.service.discovery.v3.DiscoveryResponse.
const (
	fieldVersionInfo = 1
	fieldResources   = 2
	fieldTypeURL     = 4
	fieldNonce       = 5
)

// newRawResponse encodes a DiscoveryResponse; the resources' bytes are not
// copied. It allocates once for one resource (a small response) and never
// more than three times.
func newRawResponse(version, typeURL, nonce string, res []*resource) *rawResponse {
	r := &rawResponse{}
	head := r.room[:0]
	if n := 3*(1+binary.MaxVarintLen64) + len(version) + len(typeURL) + len(nonce); n > len(r.room) {
		head = make([]byte, 0, n)
	}
	head = protowire.AppendTag(head, fieldVersionInfo, protowire.BytesType)
	head = protowire.AppendString(head, version)
	head = protowire.AppendTag(head, fieldTypeURL, protowire.BytesType)
	head = protowire.AppendString(head, typeURL)
	head = protowire.AppendTag(head, fieldNonce, protowire.BytesType)
	head = protowire.AppendString(head, nonce)
	r.head = head
	if len(res) < len(r.small) {
		r.bufs = r.small[:0]
	} else {
		r.bufs = make(mem.BufferSlice, 0, 1+len(res))
	}
	r.bufs = append(r.bufs, &r.head) // a pointer into r: no allocation
	for _, x := range res {
		r.bufs = append(r.bufs, x.field)
	}
	return r
}

// codec is the server's gRPC codec: rawResponse goes out as its buffers,
// everything else through the standard proto codec.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawResponse); ok {
		return r.bufs, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return "proto" }

// Codec returns the gRPC codec the server must use, with
// grpc.ForceServerCodecV2: it sends pre-assembled xDS responses without
// re-marshaling them and handles every other message as proto.
func Codec() encoding.CodecV2 { return newCodec() }
