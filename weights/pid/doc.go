// Package pid computes per-endpoint weights with one PID controller per
// endpoint, after Dropbox's Robinhood: the setpoint is the service's mean
// utilization (or a fixed Config.Target), each endpoint's output is a
// weight delta, and the weights are normalised per service. It is pure and
// deterministic like weights/zoneaware: no clock reads (time is
// Input.Now), no goroutines, no randomness, and Compute allocates nothing
// in steady state.
//
// # The formula
//
// For each endpoint i with a fresh report of utilization u_i, with s the
// setpoint and W the mean weight:
//
//	e_i = clamp((s − u_i) / s, −1, 1)
//	I_i = clamp(I_i + e_i, ±IntegralLimit)   (not integrated further while the weight sits at a bound it is pushed into)
//	D_i = e_i − e_i(previous report)         (0 on an endpoint's first report)
//	w_i += (Kp·e_i + Ki·I_i + Kd·D_i) · W
//
// then w_i is clamped to [MinWeight·W, MaxWeight·W], and the fresh
// endpoints are rescaled so that their total is what it was before the
// round: an endpoint without a fresh report keeps its share exactly. The
// weights are stored relative to their mean (mean 1) and pushed as
// round(Scale · w_i), at least 1: an endpoint of mean weight gets 10,000
// and a service's n weights sum to 10,000·n within n/2 (rounding; no
// largest-remainder pass, so the sum is not exact).
//
// Utilization is what Utilization returns for Config.Metric: by default
// max(CPU, in-flight/limit), because a node stuck on I/O shows low CPU and
// a CPU-only controller would raise its weight until it dies.
//
// Defaults (Kp 0.5, Ki 0.02, Kd 0) come from the simulator
// (cmd/spillway-sim --pid): speeds 1.0/1.3/0.7 reach max/avg ≤ 1.05 in
// under 10 rounds, and a cold endpoint overshoots the mean by under 5%.
// The weight itself integrates the P term, so the I term only needs to be
// small; a larger Ki makes cold endpoints overshoot.
//
// # The cases of the talk
//
//   - A new endpoint (an ID the State has not seen) starts at
//     InitialWeight × the known endpoints' mean weight (default 0.2) and
//     the controller ramps it: its low utilization is a positive error.
//     It does not count as missing before its first report.
//   - An endpoint whose report is missing (never reported, older than
//     MaxAge, or not newer than a Restore) keeps its weight and share.
//   - When more than SkipShare (default 0.3) of the known endpoints are
//     missing, the mean is not trusted: the round is skipped
//     (OutcomeSkippedMissing) and every weight held.
//   - After Restore(snapshot, at), Compute holds every weight
//     (OutcomeWaiting) until a report taken after at arrives; reports from
//     before at are never used. A new owner restores the old owner's
//     Snapshot from the store; with only the published weights, it can
//     build a Snapshot of relative weights (weight/Scale) and zero terms.
//   - When the setpoint is 0 (nothing reports load), weights are held
//     (OutcomeIdle).
//
// # Combining with zone-aware weights
//
// zone-aware decides each zone's share of a client zone's traffic; PID
// splits a zone's share among its endpoints. Over EDS the two travel
// apart: the locality's load_balancing_weight is zone-aware's, each
// endpoint's load_balancing_weight is PID's (only the ratios within the
// locality matter to a weighted picker). SplitWithinZones computes the
// product, share_i = zoneShare(zone_i) · w_i / Σ_{j in zone_i} w_j, for
// DNS SRV weights and explain.
//
// # Blending
//
// Blend gives the weights of a service moving between two strategies:
// w_i = (1 − p)·from_i/Σfrom + p·to_i/Σto, scaled to Scale·n, rounded, at
// least 1. It is pure, so every replica pushes the same numbers.
//
// # Concurrency
//
// A Controller is immutable and safe for concurrent use. A State and a
// Result belong to one service and one goroutine at a time.
package pid
