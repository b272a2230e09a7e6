package wrr

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/balancer"
)

// nopPicker stands for an endpoint's pick_first picker.
type nopPicker struct{}

func (nopPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, nil
}

// run makes n picks and counts them per entry.
func run(s *edf, k, n int) []int {
	counts := make([]int, k)
	for range n {
		counts[s.next()]++
	}
	return counts
}

// checkShares fails unless every count is within the scheduler's bound of
// its exact share: |c_i - n·w_i/W| < 2 + 2·k·w_i/W.
func checkShares(t testing.TB, weights []uint32, counts []int, n int) {
	t.Helper()
	var sum float64
	for _, w := range weights {
		sum += float64(max(w, 1))
	}
	k := float64(len(weights))
	for i, w := range weights {
		share := float64(max(w, 1)) / sum
		want := float64(n) * share
		if d, bound := math.Abs(float64(counts[i])-want), 2+2*k*share; d >= bound {
			t.Errorf("entry %d (weight %d): %d picks of %d, want %.2f ± %.2f", i, w, counts[i], n, want, bound)
		}
	}
}

// grpcFixedPoint is how grpc-go (A113 fixed point, UQ1.31) weighs
// endpoints 1, 2 and 4 in a locality that has all the traffic.
var grpcFixedPoint = []uint32{1 << 31 / 7, 2 << 31 / 7, 4 << 31 / 7}

// TestEDFConformance: from the start and without a phase, a run of m·W
// picks gives entry i exactly m·w_i; with random phases, every count stays
// within the documented bound.
func TestEDFConformance(t *testing.T) {
	tests := []struct {
		name    string
		weights []uint32
		n       int
		want    []int // exact, without phase; nil: check the bound only
	}{
		{"1:2:4", []uint32{1, 2, 4}, 7000, []int{1000, 2000, 4000}},
		{"4:2:1", []uint32{4, 2, 1}, 70, []int{40, 20, 10}},
		{"equal", []uint32{5, 5, 5, 5}, 1000, []int{250, 250, 250, 250}},
		{"single", []uint32{3}, 10, []int{10}},
		{"zero_counts_as_one", []uint32{0, 1, 2}, 400, []int{100, 100, 200}},
		{"registry_range", []uint32{1, 65535}, 65536 * 3, []int{3, 65535 * 3}},
		{"large", []uint32{math.MaxUint32, math.MaxUint32, 1}, 1000, []int{500, 500, 0}},
		{"large_ratio", []uint32{3_000_000_000, 1_000_000_000}, 4000, []int{3000, 1000}},
		{"grpc_fixed_point", grpcFixedPoint, 7000, nil},
		{"many", ramp(100), 5050 * 2, rampCounts(100, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts := run(newEDF(tt.weights, nil), len(tt.weights), tt.n)
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, counts); diff != "" {
					t.Errorf("counts (-want +got):\n%s", diff)
				}
			}
			checkShares(t, tt.weights, counts, tt.n)
			for seed := range uint64(20) {
				r := rand.New(rand.NewPCG(seed, 1))
				counts := run(newEDF(tt.weights, r.Uint32), len(tt.weights), tt.n)
				checkShares(t, tt.weights, counts, tt.n)
			}
		})
	}
}

func ramp(k int) []uint32 {
	w := make([]uint32, k)
	for i := range w {
		w[i] = uint32(i + 1)
	}
	return w
}

func rampCounts(k, m int) []int {
	c := make([]int, k)
	for i := range c {
		c[i] = (i + 1) * m
	}
	return c
}

// TestEDFSmooth: EDF interleaves, it does not send bursts: with 1:2:4 every
// window of 7 picks from the start holds exactly 1, 2 and 4.
func TestEDFSmooth(t *testing.T) {
	s := newEDF([]uint32{1, 2, 4}, nil)
	for w := range 100 {
		if got, want := run(s, 3, 7), []int{1, 2, 4}; !cmp.Equal(got, want) {
			t.Fatalf("window %d = %v, want %v", w, got, want)
		}
	}
}

// TestEDFRebase: shifting every deadline back (what next does before the
// numerators could overflow) does not change the schedule.
func TestEDFRebase(t *testing.T) {
	weights := []uint32{1, 7, 1 << 20, math.MaxUint32}
	ref := newEDF(weights, nil)
	far := newEDF(weights, nil)
	// Move far's virtual time on by q/edfScale (every numerator by q·w, the
	// same schedule) to just before the largest weight's numerator reaches
	// the rebase threshold.
	q := (edfRebaseAt-edfScale)/uint64(math.MaxUint32) - 1
	for i := range far.ents {
		far.ents[i].num += q * far.ents[i].w
	}
	rebased := false
	for i := range 300_000 {
		got, want := far.next(), ref.next()
		if got != want {
			t.Fatalf("pick %d = entry %d, want %d", i, got, want)
		}
		rebased = rebased || far.ents[3].num < edfRebaseAt/2
	}
	if !rebased {
		t.Fatal("the scheduler never rebased; the test does not reach the threshold")
	}
}

// FuzzEDF: any weights, any phase, any run length: no panic, and every
// entry's count within the documented bound of its share.
func FuzzEDF(f *testing.F) {
	le := func(ws ...uint32) []byte {
		var b []byte
		for _, w := range ws {
			b = binary.LittleEndian.AppendUint32(b, w)
		}
		return b
	}
	f.Add(le(1, 2, 4), uint16(7000), uint64(0))
	f.Add(le(1, 2, 4), uint16(7001), uint64(42))
	f.Add(le(7), uint16(3), uint64(1))
	f.Add(le(0, 0, 0), uint16(100), uint64(9))
	f.Add(le(math.MaxUint32, 1, math.MaxUint32), uint16(5000), uint64(3))
	f.Add(le(grpcFixedPoint...), uint16(65535), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, n uint16, seed uint64) {
		var weights []uint32
		for len(data) >= 4 && len(weights) < 64 {
			weights = append(weights, binary.LittleEndian.Uint32(data))
			data = data[4:]
		}
		if len(weights) == 0 {
			return
		}
		var phase func() uint32
		if seed != 0 {
			phase = rand.New(rand.NewPCG(seed, seed)).Uint32
		}
		s := newEDF(weights, phase)
		counts := make([]int, len(weights))
		for range int(n) {
			i := s.next()
			if i < 0 || i >= len(weights) {
				t.Fatalf("next = %d, want an index below %d", i, len(weights))
			}
			counts[i]++
		}
		checkShares(t, weights, counts, int(n))
	})
}

// BenchmarkPick: one weighted pick (scheduler and lock) at several
// endpoint counts, from many goroutines.
func BenchmarkPick(b *testing.B) {
	for _, k := range []int{3, 100, 10_000} {
		b.Run(fmt.Sprintf("endpoints=%d", k), func(b *testing.B) {
			weights := make([]uint32, k)
			pickers := make([]balancer.Picker, k)
			for i := range weights {
				weights[i] = uint32(1 + i%7)
				pickers[i] = nopPicker{}
			}
			p := &picker{pickers: pickers, sched: newEDF(weights, rand.Uint32)}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := p.Pick(balancer.PickInfo{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
