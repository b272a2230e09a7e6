package pid

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// compatWeights are the weights Compute gave for compatRun before the
// error penalty and guard existed (recorded at 39d570c). A service whose
// backends send no request rates, or send rates without errors and with
// equal latencies, must get exactly these: never update them.
var compatWeights = [2][][]uint32{
	{
		{10867, 11733, 9133, 10867, 7400},
		{11279, 12996, 8512, 11279, 5934},
		{11344, 13715, 8068, 11344, 5528},
		{11309, 14137, 7829, 11309, 5416},
		{11257, 14390, 7713, 11257, 5382},
		{11212, 14543, 7660, 11212, 5372},
		{11179, 14635, 7637, 11179, 5370},
		{11155, 14687, 7628, 11155, 5374},
		{11140, 14716, 7627, 11140, 5377},
		{11129, 14730, 7630, 11129, 5384},
		{12834, 17000, 8807, 12834, 6218, 2308},
		{12829, 16999, 8812, 12829, 6224, 2308},
		{11963, 16114, 7971, 11963, 5395, 6594},
		{11323, 15357, 7527, 11323, 5189, 9280},
		{10913, 14791, 7324, 10913, 5128, 10932},
		{10665, 14390, 7235, 10665, 5108, 11938},
		{10521, 14113, 7200, 10521, 5101, 12545},
		{10440, 13926, 7187, 10440, 5102, 12906},
		{10396, 13801, 7186, 10396, 5105, 13117},
		{10375, 13718, 7188, 10375, 5109, 13235},
		{10354, 13718, 7184, 10354, 5106, 13283},
		{10356, 13664, 7195, 10356, 5119, 13311},
		{10361, 13631, 7204, 10361, 5125, 13318},
		{10367, 13611, 7211, 10367, 5132, 13313},
		{10373, 13600, 7219, 10373, 5137, 13298},
		{10380, 13595, 7225, 10380, 5142, 13279},
		{10386, 13592, 7231, 10386, 5147, 13258},
		{10392, 13593, 7237, 10392, 5152, 13235},
		{10398, 13594, 7242, 10398, 5156, 13212},
		{10403, 13596, 7248, 10403, 5161, 13189},
		{10409, 13599, 7252, 10409, 5165, 13166},
		{10413, 13602, 7258, 10413, 5169, 13144},
		{10419, 13605, 7262, 10419, 5173, 13123},
		{10423, 13609, 7266, 10423, 5176, 13102},
		{10428, 13612, 7271, 10428, 5180, 13083},
		{10432, 13615, 7275, 10432, 5183, 13063},
		{10436, 13618, 7278, 10436, 5187, 13045},
		{10440, 13621, 7283, 10440, 5189, 13028},
		{10443, 13624, 7286, 10443, 5193, 13011},
		{10447, 13626, 7289, 10447, 5196, 12995},
	},
	{
		{11161, 12321, 8839, 11161, 6518},
		{11244, 14273, 7696, 11244, 5543},
		{11255, 14589, 7768, 11255, 5132},
		{11365, 15473, 7046, 11365, 4752},
		{11175, 15602, 7296, 11175, 4752},
		{11313, 16092, 6788, 11313, 4494},
		{11066, 16020, 7109, 11066, 4739},
		{11281, 16392, 6746, 11281, 4301},
		{10965, 16170, 6979, 10965, 4922},
		{11314, 16622, 6810, 11314, 3940},
		{12567, 18700, 7848, 12567, 6009, 2308},
		{13017, 19078, 8123, 13017, 4458, 2308},
		{11538, 17089, 7153, 11538, 5838, 6842},
		{11557, 16647, 7545, 11557, 4031, 8663},
		{10748, 15487, 6827, 10748, 5931, 10260},
		{10932, 15407, 7343, 10932, 3704, 11682},
		{10288, 14490, 6657, 10288, 6155, 12123},
		{10677, 14750, 7312, 10677, 3370, 13213},
		{10028, 13904, 6544, 10028, 6477, 13018},
		{10610, 14441, 7369, 10610, 2973, 13997},
		{9679, 14441, 6322, 9679, 6762, 13116},
		{10579, 14536, 7481, 10579, 2556, 14269},
		{9700, 13636, 6302, 9700, 7306, 13355},
		{10689, 14516, 7627, 10689, 1957, 14522},
		{9627, 13300, 6209, 9627, 7943, 13294},
		{10865, 14575, 7826, 10865, 1162, 14707},
		{9517, 13077, 6061, 9517, 8723, 13105},
		{10905, 14500, 7951, 10905, 1116, 14623},
		{9446, 12934, 5951, 9446, 9318, 12905},
		{10935, 14459, 8054, 10935, 1119, 14499},
		{9396, 12840, 5869, 9396, 9784, 12715},
		{10962, 14446, 8139, 10962, 1122, 14369},
		{9357, 12772, 5804, 9357, 10173, 12535},
		{10988, 14447, 8210, 10988, 1124, 14243},
		{9339, 12742, 5760, 9339, 10430, 12390},
		{11011, 14458, 8266, 11011, 1126, 14128},
		{9361, 12770, 5747, 9361, 10454, 12306},
		{11031, 14483, 8300, 11031, 1127, 14028},
		{9382, 12800, 5742, 9382, 10464, 12229},
		{11050, 14512, 8322, 11050, 1128, 13938},
	},
}

// compatRun drives one controller through 40 rounds of a fleet of
// speeds 1, 1.3, 0.7, 1, 0.5 with a sixth endpoint (speed 1.2) joining at
// round 10 without a report for two rounds and one report missing at
// round 20; each round's utilization follows from the weights. quality
// sets each endpoint's RPS, EPS and latency.
func compatRun(t *testing.T, cfg Config, quality func(e *Endpoint)) [][]uint32 {
	t.Helper()
	c := mustNew(t, cfg)
	var st State
	var r Result
	speeds := []float64{1, 1.3, 0.7, 1, 0.5, 1.2}
	total := 3.0
	u := []float64{0.5, 0.4, 0.7, 0.5, 0.9, 0.45}
	var got [][]uint32
	for k := range 40 {
		now := t0.Add(time.Duration(k) * 10 * time.Second)
		n := 5
		if k >= 10 {
			n = 6
		}
		in := &Input{Now: now}
		for i := range n {
			e := Endpoint{ID: fmt.Sprintf("ep%d", i), Zone: "a", Utilization: u[i], Reported: now}
			if (k >= 10 && i == 5 && k < 12) || (k == 20 && i == 1) {
				e.Reported = time.Time{}
			}
			quality(&e)
			in.Endpoints = append(in.Endpoints, e)
		}
		c.Compute(&st, in, &r)
		if r.Guarded != 0 {
			t.Fatalf("round %d: %d endpoints guarded, want none", k, r.Guarded)
		}
		var sum float64
		for _, e := range r.Endpoints {
			sum += float64(e.Weight)
		}
		ws := make([]uint32, len(r.Endpoints))
		for i, e := range r.Endpoints {
			u[i] = float64(e.Weight) / sum * total / speeds[i]
			ws[i] = e.Weight
		}
		got = append(got, ws)
	}
	return got
}

// TestCompatibility: reports without the new fields give today's weights
// exactly, with the guard and penalty on (the default) or off; so do
// reports whose endpoints have no errors and the same latency, or too
// few requests to count.
func TestCompatibility(t *testing.T) {
	cfgs := []Config{{}, {Kd: new(0.3), Target: 0.5, MaxWeight: 3}}
	qualities := []struct {
		name string
		set  func(e *Endpoint)
	}{
		{"no_fields", func(*Endpoint) {}},
		{"no_errors", func(e *Endpoint) { e.RPS, e.LatencyMs = 100, 20 }},
		{"too_few_requests", func(e *Endpoint) { e.RPS, e.EPS, e.LatencyMs = 0.5, 0.5, 900 }},
		{"nan", func(e *Endpoint) { e.RPS, e.EPS, e.LatencyMs = math.NaN(), math.NaN(), math.NaN() }},
	}
	for ci, base := range cfgs {
		for _, guard := range []bool{true, false} {
			for _, q := range qualities {
				t.Run(fmt.Sprintf("cfg%d/guard=%v/%s", ci, guard, q.name), func(t *testing.T) {
					cfg := base
					cfg.ErrorGuard = &guard
					if !guard {
						cfg.ErrorPenalty = new(0.0)
					}
					if diff := cmp.Diff(compatWeights[ci], compatRun(t, cfg, q.set)); diff != "" {
						t.Errorf("weights differ from before the guard (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}
