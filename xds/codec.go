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
}

func hashHex(b ...[]byte) string {
	h := fnv.New64a()
	for _, x := range b {
		h.Write(x)
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// rawResponse is a DiscoveryResponse assembled from pre-marshaled
// resources. The codec writes it as a list of buffers: a few bytes of
// framing per stream around the shared resource bytes.
type rawResponse struct {
	bufs mem.BufferSlice
}

// Field numbers of envoy.service.discovery.v3.DiscoveryResponse.
const (
	fieldVersionInfo = 1
	fieldResources   = 2
	fieldTypeURL     = 4
	fieldNonce       = 5
)

// newRawResponse encodes a DiscoveryResponse; the resources' bytes are not
// copied.
func newRawResponse(version, typeURL, nonce string, res []*resource) *rawResponse {
	head := make([]byte, 0, 16+len(version)+len(typeURL)+len(nonce)+len(res)*6)
	head = protowire.AppendTag(head, fieldVersionInfo, protowire.BytesType)
	head = protowire.AppendString(head, version)
	head = protowire.AppendTag(head, fieldTypeURL, protowire.BytesType)
	head = protowire.AppendString(head, typeURL)
	head = protowire.AppendTag(head, fieldNonce, protowire.BytesType)
	head = protowire.AppendString(head, nonce)
	bufs := make(mem.BufferSlice, 0, 1+2*len(res))
	bufs = append(bufs, mem.SliceBuffer(head))
	// Each resource's tag and length go in one small shared-nothing slice
	// carved from a single allocation.
	prefixes := make([]byte, 0, len(res)*(1+binary.MaxVarintLen64))
	for _, r := range res {
		start := len(prefixes)
		prefixes = protowire.AppendTag(prefixes, fieldResources, protowire.BytesType)
		prefixes = protowire.AppendVarint(prefixes, uint64(len(r.raw)))
		bufs = append(bufs, mem.SliceBuffer(prefixes[start:len(prefixes):len(prefixes)]), mem.SliceBuffer(r.raw))
	}
	return &rawResponse{bufs: bufs}
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
