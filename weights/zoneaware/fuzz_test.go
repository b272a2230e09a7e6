package zoneaware

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// byteSource reads bounded values from fuzz bytes; past the end it reads
// zeros.
type byteSource struct{ b []byte }

func (s *byteSource) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

func (s *byteSource) intn(n int) int { return int(s.byte()) % n }

// rate is usually a plain rate up to ~25,000, sometimes a value load data
// must never contain.
func (s *byteSource) rate() float64 {
	switch v := s.byte(); v {
	case 255:
		return math.NaN()
	case 254:
		return -1
	case 253:
		return math.Inf(1)
	case 252:
		return 1e300
	default:
		return float64(v) * float64(s.intn(100))
	}
}

// genConfig and genCycles turn bytes into a Config and a sequence of
// cycles of one service: 1..5 zones (named so that "" can be one), 0..4
// endpoints each, changing health and membership, load data that is
// fresh, stale, from the future or garbage, and a clock that mostly moves
// forward.
func genConfig(s *byteSource) Config {
	cfg := Config{}
	if s.intn(2) == 0 {
		cfg.ProbeShare = new(float64(s.intn(21)) / 100)
	}
	if s.intn(2) == 0 {
		cfg.MoveThreshold = new(float64(s.intn(10)) / 100)
	}
	cfg.TargetUtilization = float64(1+s.intn(10)) / 10
	cfg.Scale = []uint32{0, 10, 100, 1 << 20}[s.intn(4)]
	cfg.QueueSensitivity = new(float64(s.intn(5)))
	return cfg
}

var fuzzZones = []string{"", "a", "b", "c", "d"}

func genCycles(s *byteSource, n int) []*Input {
	now := t0
	var ins []*Input
	for range n {
		switch s.intn(8) {
		case 0: // clock goes back
			now = now.Add(-time.Duration(s.intn(20)) * time.Second)
		default:
			now = now.Add(time.Duration(s.intn(40)) * time.Second)
		}
		in := &Input{Now: now}
		zones := fuzzZones[s.intn(2):][:1+s.intn(4)]
		for zi, z := range zones {
			for i := range s.intn(5) {
				in.Endpoints = append(in.Endpoints, Endpoint{
					ID:         fmt.Sprintf("%d-%d", zi, i),
					Zone:       z,
					Healthy:    s.intn(5) != 0,
					Registered: t0.Add(time.Duration(s.intn(10)-5) * 20 * time.Second),
				})
			}
		}
		if s.intn(4) != 0 {
			age := time.Duration(s.intn(50)-5) * time.Second
			var issued float64
			for _, z := range zones {
				if s.intn(4) == 0 {
					continue
				}
				l := ZoneLoad{Zone: z, IssuedRPS: s.rate(), InProgress: s.rate() / 10, Updated: now.Add(-age)}
				e := float64(s.intn(101)) / 100
				l.ErroredRPS, l.SucceededRPS = l.IssuedRPS*e, l.IssuedRPS*(1-e)
				issued += l.IssuedRPS
				in.Loads = append(in.Loads, l)
			}
			cz := fuzzZones[:1+s.intn(len(fuzzZones))]
			weights := make([]float64, len(cz))
			var sum float64
			for i := range cz {
				weights[i] = float64(s.intn(10))
				sum += weights[i]
			}
			for i, z := range cz {
				d := Demand{ClientZone: z, Updated: now.Add(-age)}
				if sum > 0 {
					d.RPS = issued * weights[i] / sum
				}
				if s.intn(16) == 0 {
					d.RPS = s.rate()
				}
				in.Demand = append(in.Demand, d)
			}
		}
		for _, z := range fuzzZones[s.intn(3):] {
			if k := s.intn(6); k > 0 {
				in.Clients = append(in.Clients, ClientCount{Zone: z, Count: k - 2})
			}
		}
		ins = append(ins, in)
	}
	return ins
}

// fuzzInputs is genCycles fed by a seeded generator.
func fuzzInputs(seed uint64, n int) []*Input {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, 64*n)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return genCycles(&byteSource{b}, n)
}

func checkResult(t *testing.T, in *Input, out *Result, prev map[string][]ZoneWeight) {
	t.Helper()
	healthy := map[string]bool{}
	for _, e := range in.Endpoints {
		if e.Healthy {
			healthy[e.Zone] = true
		}
	}
	if len(out.Routes) == 0 || out.Routes[0].ClientZone != "" {
		t.Fatalf("Routes[0] is not the zoneless route: %+v", out.Routes)
	}
	for _, f := range []float64{out.SameZone, out.Optimum} {
		if math.IsNaN(f) || f < 0 || f > 1+1e-9 {
			t.Fatalf("SameZone %v Optimum %v", out.SameZone, out.Optimum)
		}
	}
	for _, z := range out.Zones {
		for _, f := range []float64{z.Trusted, z.QueueFactor, z.ErrorFactor, z.Health, z.Capacity, z.CapacityShare, z.DemandShare, z.Load} {
			if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
				t.Fatalf("zone %+v", z)
			}
		}
	}
	for _, rt := range out.Routes {
		var sum float64
		seen := map[string]bool{}
		for _, w := range rt.Weights {
			if w.Weight < 1 || math.IsNaN(w.Share) || w.Share < 0 {
				t.Fatalf("zone %q: weight %+v", rt.ClientZone, w)
			}
			if !healthy[w.Zone] {
				t.Fatalf("zone %q: weight for %q, which has no healthy endpoint", rt.ClientZone, w.Zone)
			}
			seen[w.Zone] = true
			sum += w.Share
		}
		if len(seen) != len(healthy) {
			t.Fatalf("zone %q: weights %v, want every healthy zone %v", rt.ClientZone, rt.Weights, healthy)
		}
		if len(rt.Weights) > 0 && math.Abs(sum-1) > 1e-6 {
			t.Fatalf("zone %q: shares sum to %v", rt.ClientZone, sum)
		}
		if p, ok := prev[rt.ClientZone]; ok && !rt.Changed {
			if fmt.Sprint(p) != fmt.Sprint(rt.Weights) {
				t.Fatalf("zone %q: Changed false but %v -> %v", rt.ClientZone, p, rt.Weights)
			}
		}
		prev[rt.ClientZone] = append([]ZoneWeight(nil), rt.Weights...)
		_ = rt.Explain.String()
	}
}

func FuzzCompute(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3} {
		r := rand.New(rand.NewPCG(seed, 0))
		b := make([]byte, 400)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{data}
		c, err := New(genConfig(s))
		if err != nil {
			t.Fatal(err)
		}
		var st State
		var out Result
		prev := map[string][]ZoneWeight{}
		for _, in := range genCycles(s, 1+s.intn(8)) {
			c.Compute(&st, in, &out)
			checkResult(t, in, &out, prev)
		}
	})
}

// TestGenerated runs the fuzz checks over many generated sequences, so that
// plain `go test` covers what the fuzzer checks.
func TestGenerated(t *testing.T) {
	c := mustNew(t, Config{})
	for seed := range uint64(300) {
		var st State
		var out Result
		prev := map[string][]ZoneWeight{}
		for _, in := range fuzzInputs(seed, 12) {
			c.Compute(&st, in, &out)
			checkResult(t, in, &out, prev)
		}
	}
}
