package xds

import (
	"testing"
	"unsafe"
)

// TestStreamStateSize keeps the structs every ADS stream holds for its
// life within the allocation size classes they fill today (docs/benchmarks.md,
// "Where the memory goes"): at one stream per connection a stream's
// memory is mostly grpc-go's transport, and spillway's own share should not
// creep up unnoticed. A struct that grows past its class costs the next
// class's bytes for every stream; raise a budget only with a reason.
func TestStreamStateSize(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sotwStream", unsafe.Sizeof(sotwStream{}), 512},
		// 448 until the client's region joined nodeInfo (EDS priorities
		// by region): delta streams are Envoy's, a few per proxy.
		{"deltaStream", unsafe.Sizeof(deltaStream{}), 480},
		{"watcher", unsafe.Sizeof(watcher{}), 96},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.got > c.want {
				t.Errorf("unsafe.Sizeof(%s{}) = %d bytes, want at most %d (its size class)", c.name, c.got, c.want)
			}
		})
	}
}
