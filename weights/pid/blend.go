package pid

import (
	"errors"
	"fmt"
	"math"
)

// Blend combines two strategies' weights for the same endpoints (same
// order) into dst, reusing it: with p = percent/100,
//
//	w_i = round(Scale · n · ((1 − p)·from_i/Σfrom + p·to_i/Σto)), at least 1
//
// so each strategy's weights count only by their share of the service, and
// the result has a mean of about Scale whatever scales the inputs used.
// percent is in [0, 100]; 0 gives from renormalised, 100 gives to. The
// function is pure: every replica computes the same numbers.
func Blend(dst, from, to []uint32, percent float64) ([]uint32, error) {
	if len(from) != len(to) {
		return dst, fmt.Errorf("blend: from has %d endpoints, to has %d, want the same", len(from), len(to))
	}
	if !(percent >= 0 && percent <= 100) {
		return dst, fmt.Errorf("blend: percent: %v, want 0..100", percent)
	}
	var sf, stt float64
	for i := range from {
		sf += float64(from[i])
		stt += float64(to[i])
	}
	dst = dst[:0]
	if len(from) == 0 {
		return dst, nil
	}
	if sf == 0 || stt == 0 {
		return dst, errors.New("blend: weights sum to 0, want at least one weight > 0 in from and in to")
	}
	p := percent / 100
	total := float64(Scale) * float64(len(from))
	for i := range from {
		w := total * ((1-p)*float64(from[i])/sf + p*float64(to[i])/stt)
		dst = append(dst, uint32(max(1, math.Round(w))))
	}
	return dst, nil
}

// SplitWithinZones combines zone-aware and PID weights into each
// endpoint's share of one client zone's traffic: zone-aware decides the
// zone's share (zoneShare, by zone name), PID splits it among the zone's
// endpoints in proportion to their weights:
//
//	share_i = zoneShare[zone_i] · w_i / Σ_{j in zone_i} w_j
//
// zones and weights are per endpoint, same order. A zone missing from
// zoneShare gets 0. Over EDS the two parts travel apart (locality weight =
// zone share, endpoint load_balancing_weight = PID weight) and the client
// does this product; SplitWithinZones is for DNS SRV weights and explain.
func SplitWithinZones(dst []float64, zones []string, weights []uint32, zoneShare map[string]float64) ([]float64, error) {
	if len(zones) != len(weights) {
		return dst, fmt.Errorf("split: %d zones, %d weights, want one zone per weight", len(zones), len(weights))
	}
	sums := make(map[string]float64, len(zoneShare))
	for i, z := range zones {
		sums[z] += float64(weights[i])
	}
	dst = dst[:0]
	for i, z := range zones {
		s := 0.0
		if sums[z] > 0 {
			s = zoneShare[z] * float64(weights[i]) / sums[z]
		}
		dst = append(dst, s)
	}
	return dst, nil
}
