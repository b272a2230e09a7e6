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
// For each endpoint i with a fresh report of utilization u_i (its
// effective utilization when it reports errors, below), with s the
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
// # Errors and latency: the death-spiral guard
//
// In-flight counting catches a node whose requests pile up; it does not
// catch one that fails fast (a broken disk answering EIO, a dependency
// refusing connections): its CPU and in-flight stay low, so the
// controller raises its weight to bring its utilization up to the mean,
// sends it more traffic that it fails, and raises it again — the death
// spiral of Robinhood's operating lesson, bounded only by MaxWeight. So an
// endpoint may also report what it served (Endpoint.RPS, EPS and
// LatencyMs; clientlib/utilization sends them), and two brakes use it:
//
//   - The penalty (gRFC A58's error_utilization_penalty): the controller
//     steers the effective utilization u_i + (eps_i/rps_i) × ErrorPenalty
//     (default 1: a 30% error rate counts as 0.3 of utilization), and the
//     setpoint is the mean effective utilization. Alone it settles where a
//     failing endpoint's effective utilization meets the others': with the
//     CPU of a failure a tenth of a served request's, that is still more
//     than a quarter of its requests failing (cmd/spillway-sim
//     pid:stuck-io).
//   - The guard (ErrorGuard, on by default): among the fresh endpoints with
//     at least MinRPS requests per second (1), m_err is the lower median
//     error rate and m_lat the lower median latency. An endpoint is
//     guarded when its error rate is above max(2 × m_err, m_err + 5
//     points) (GuardErrorRatio, GuardErrorPoints), or its latency above
//     max(3 × m_lat, m_lat + 50 ms) (GuardLatencyRatio, GuardLatencyMs). A
//     guarded endpoint gets no increase: its weight is halved
//     (GuardStep), down to GuardMinWeight (1%) of the mean weight — below
//     MinWeight, so that a dead endpoint gets almost nothing — and never
//     more than the median weight; its integral winds no further up, it
//     is left out of the setpoint, and the others share what it lost.
//     After every step it is cut to the median weight again if the
//     others' moves lowered it. Until it has reported GuardHold (20)
//     healthy rounds with requests it is on probation: it rises by at
//     most GuardRise (25%) of its weight a round and never above the
//     median weight. An endpoint that fails only under load is so held
//     near what it can serve, and a dead one near the traffic at which
//     its errors show (MinRPS), instead of swinging back up; one that
//     recovered is back at the median weight about 20 rounds after its
//     last error.
//
// The lower median means the median endpoint is never guarded: when most
// endpoints fail alike the problem is the service's, not one endpoint's,
// and nobody is singled out; one failing endpoint of two is. A guarded
// endpoint's share of the service never grows, except at the bounds (it
// at its floor, or another endpoint at MaxWeight, where the total is not
// kept). Probation is not in the Snapshot: a new owner starts without it,
// and the guard acts again on the next fresh reports. When every unguarded
// fresh endpoint is on probation, they are steered freely that round, so
// that someone takes up what the guarded ones lose.
//
// An endpoint whose report has no request rate (or one under MinRPS)
// takes part in neither brake: a service whose backends send utilization
// only gets exactly the weights it got before the guard existed
// (TestCompatibility). ErrorGuard false with ErrorPenalty 0 is that
// controller too, for a comparison.
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
