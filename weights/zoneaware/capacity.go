package zoneaware

import (
	"math"
	"time"
)

func usable(v float64) bool { return v >= 0 && !math.IsInf(v, 1) } // false for NaN

// checkLoads validates the load data and links Loads rows to zones. It
// returns FallbackNone, FallbackStale or FallbackInconsistent.
func (c *Calculator) checkLoads(st *State, in *Input) (fb Fallback, reason, rzone string, age time.Duration) {
	now := in.Now
	future := now.Add(c.p.interval)
	var oldest string
	var sumIssued, sumDemand float64
	seenZoneless := false
	for i := range in.Loads {
		l := &in.Loads[i]
		if !usable(l.IssuedRPS) || !usable(l.SucceededRPS) || !usable(l.ErroredRPS) || !usable(l.InProgress) {
			return FallbackInconsistent, ReasonNegative, l.Zone, age
		}
		if l.Updated.After(future) {
			return FallbackInconsistent, ReasonFuture, l.Zone, age
		}
		if a := now.Sub(l.Updated); a > age || i == 0 {
			age, oldest = a, l.Zone
		}
		sumIssued += l.IssuedRPS
		if zi := st.find(l.Zone); zi >= 0 {
			if st.zones[zi].load >= 0 {
				return FallbackInconsistent, ReasonDuplicate, l.Zone, age
			}
			st.zones[zi].load = i
		}
	}
	for i := range in.Demand {
		d := &in.Demand[i]
		if !usable(d.RPS) {
			return FallbackInconsistent, ReasonNegative, d.ClientZone, age
		}
		if d.Updated.After(future) {
			return FallbackInconsistent, ReasonFuture, d.ClientZone, age
		}
		if a := now.Sub(d.Updated); a > age || (i == 0 && len(in.Loads) == 0) {
			age, oldest = a, d.ClientZone
		}
		sumDemand += d.RPS
		if d.ClientZone == "" {
			if seenZoneless {
				return FallbackInconsistent, ReasonDuplicate, "", age
			}
			seenZoneless = true
			continue
		}
		zi := st.find(d.ClientZone)
		if st.zones[zi].demandRow {
			return FallbackInconsistent, ReasonDuplicate, d.ClientZone, age
		}
		st.zones[zi].demandRow = true
	}
	if age < 0 {
		age = 0
	}
	if (len(in.Loads) > 0 || len(in.Demand) > 0) && age > c.p.staleAfter {
		return FallbackStale, ReasonOld, oldest, age
	}
	if m := math.Max(sumIssued, sumDemand); m > 0 && math.Abs(sumIssued-sumDemand) > 0.25*m {
		return FallbackInconsistent, ReasonTotalsMismatch, "", age
	}
	return FallbackNone, "", "", age
}

// queueDeadBand: time in flight up to this multiple of the average is not
// queueing.
const queueDeadBand = 1.5

// queueReports is how many load reports (this cycle's and the ones before)
// the queue signal pools: grpc-go's in-progress count is a point sample
// taken when the report is made, noise at low concurrency.
const queueReports = 3

// queueNoise is the sampling noise the queue signal discounts, in standard
// deviations of a Poisson count: a point sample of requests in flight
// whose mean is m varies by about √m.
const queueNoise = 3

// errorTolerance is the error ratio a zone may show without losing
// health: a healthy zone rejects a few requests now and then (a small
// pool at a moderate load does), and moving traffic away for that only
// moves the rejections.
const errorTolerance = 0.01

func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

// excessLatency judges a zone's time in flight against the rest of the
// fleet's from requests in flight n (the zone) and nRest (the other zones)
// and issued rates iss and issRest, each summed over the same reports.
// Were the zone's time in flight at the dead band, band times the rest's,
// its share of the n + nRest requests in flight would be binomial with
// p0 = band·iss / (band·iss + issRest); slow reports whether n is more than
// queueNoise standard deviations above that. q is the zone's time in
// flight over band times the fleet's (the zone included, as the factor
// 1 / (1 + s·(q − 1)) is calibrated), after taking the noise off n.
func excessLatency(n, iss, nRest, issRest float64) (q float64, slow bool) {
	tot := n + nRest
	if iss <= 0 || issRest <= 0 || tot <= 0 {
		return 0, false
	}
	a := queueDeadBand * iss
	p0 := a / (a + issRest)
	excess := max(0, n-queueNoise*math.Sqrt(tot*p0*(1-p0)))
	if excess <= tot*p0 {
		return 0, false
	}
	fleet := (excess + nRest) / (iss + issRest)
	return excess / iss / (queueDeadBand * fleet), true
}

// capacities computes every zone's capacity and share; it returns the
// total capacity.
func (c *Calculator) capacities(st *State, in *Input, lrs bool) float64 {
	p := &c.p
	var qSum, tSum, cSum, cIss float64 // in progress and issued: pooled, current
	j := 0
	for i := range st.zones {
		z := &st.zones[i]
		z.qf, z.ef, z.health, z.latency, z.limit, z.hidx, z.capped = 1, 1, 1, 0, 0, -1, false
		z.prev, z.pIn, z.pIss, z.pN, z.cIn, z.cIss = -1, 0, 0, 0, 0, 0
		for j < len(st.health) && st.health[j].zone < z.name {
			j++
		}
		if j < len(st.health) && st.health[j].zone == z.name {
			z.prev = j
		}
		if !lrs || z.trusted == 0 || z.load < 0 {
			continue
		}
		l := &in.Loads[z.load]
		z.inflight = l.InProgress / z.trusted
		// Queueing is judged by time in flight, not by requests in flight:
		// by Little's law Σ InProgress / Σ IssuedRPS is the mean time a
		// request spends in the zone, which does not grow just because
		// the zone is given more traffic, and does not count cold
		// endpoints twice. The sums run over the last queueReports
		// reports, since each in-progress figure is a point sample.
		z.cIn, z.cIss = l.InProgress, l.IssuedRPS
		cSum += z.cIn
		cIss += z.cIss
		z.pIn, z.pIss, z.pN = l.InProgress, l.IssuedRPS, 1
		if z.prev >= 0 {
			h := &st.health[z.prev]
			for k := range h.n {
				z.pIn += h.hist[k].inProgress
				z.pIss += h.hist[k].issued
				z.pN++
			}
		}
		if z.pIss > 0 {
			z.latency = z.pIn / z.pIss
			qSum += z.pIn
			tSum += z.pIss
		}
		if den := max(l.IssuedRPS, l.SucceededRPS+l.ErroredRPS); den > 0 {
			z.errRatio = min(1, l.ErroredRPS/den)
		}
	}
	if lrs {
		next := st.healthNext[:0]
		for i := range st.zones {
			z := &st.zones[i]
			if z.trusted == 0 {
				continue
			}
			// Each zone against the rest of the fleet (a zone that holds
			// most of the traffic would otherwise set its own bar), over
			// the pooled reports; and over this report alone, so that a
			// zone that has just slowed down is seen at once.
			q, slow := excessLatency(z.pIn, z.pIss, qSum-z.pIn, tSum-z.pIss)
			_, slowNow := excessLatency(z.cIn, z.cIss, cSum-z.cIn, cIss-z.cIss)
			// Within the band even before the noise is discounted: fast.
			ref := ratio(qSum-z.pIn, tSum-z.pIss)
			fast := ref > 0 && z.pIss > 0 && z.pIn <= queueDeadBand*ref*z.pIss
			// Requests in flight are noise at low concurrency: queueing
			// counts only when the zone holds at least one request per
			// trusted endpoint.
			if slow && q > 1 && z.pIn >= z.pN*z.trusted {
				z.qf = 1 / (1 + p.queueSens*(q-1))
			}
			slow = slow || slowNow
			z.ef = max(0, 1-p.errorSens*max(0, z.errRatio-errorTolerance))
			target := max(p.floor, z.qf*z.ef)
			z.health = target
			var hist [queueReports - 1]loadSample
			nh := 0
			if z.prev >= 0 {
				prev := &st.health[z.prev]
				hist, nh = prev.hist, prev.n
				z.limit = prev.limit
				if target > prev.h {
					// Rise multiplicatively: a zone just taken off
					// traffic looks healthy because it has none, and an
					// additive step from the floor would hand it several
					// times what it can carry and knock it over again.
					// Doubling takes about RecoveryRamp/2.
					grow := 1.0
					if in.Now.After(prev.at) {
						grow += 2 * float64(in.Now.Sub(prev.at)) / float64(p.recovery)
					}
					z.health = min(target, prev.h*grow)
				}
			}
			// Headroom: a zone failing requests while slow is at its
			// capacity, its successful rate; hold it under DegradedTarget
			// of that until it looks healthy again: no errors above
			// saturatedErrors and a time in flight within the band.
			// (A zone that fails fast is not measured: a small pool
			// rejects long before it is saturated, and its errors are left
			// to the error factor.) Setting the limit takes slowness
			// beyond the sampling noise; clearing it takes a time in
			// flight within the band, noise included, so that a degraded
			// zone held at a low rate, where its slowness is lost in the
			// noise, is not let go.
			if z.load >= 0 {
				l := &in.Loads[z.load]
				if l.IssuedRPS > 0 {
					switch {
					case z.errRatio > saturatedErrors && slow:
						z.limit = p.degraded * l.SucceededRPS
					case z.errRatio <= saturatedErrors && fast:
						z.limit = 0
					}
				}
				// This report joins the queue signal's window.
				copy(hist[1:], hist[:len(hist)-1])
				hist[0] = loadSample{inProgress: l.InProgress, issued: l.IssuedRPS}
				nh = min(nh+1, len(hist))
			}
			z.hidx = len(next)
			next = append(next, zoneHealth{zone: z.name, h: z.health, at: in.Now, limit: z.limit, hist: hist, n: nh})
		}
		st.healthNext = next[:0]
		st.health = append(st.health[:0], next...)
	}
	total := 0.0
	for i := range st.zones {
		z := &st.zones[i]
		z.capacity = z.trusted * z.health
		total += z.capacity
	}
	if lrs {
		total = c.applyLimits(st, in, total)
	}
	for i := range st.zones {
		if total > 0 {
			st.zones[i].C = st.zones[i].capacity / total
		}
	}
	return total
}

// applyLimits lowers the capacity of every zone whose share would send it
// more than its limit (in requests per second of this cycle's issued
// total) to exactly that share, the others sharing the rest in proportion
// to their capacity, and stores the health that gives. It returns the new
// total capacity.
func (c *Calculator) applyLimits(st *State, in *Input, total float64) float64 {
	var issued float64
	for i := range in.Loads {
		issued += in.Loads[i].IssuedRPS
	}
	if issued <= 0 || total <= 0 {
		return total
	}
	// Water-filling: cap the zones above their limit; the others grow, and
	// may cross theirs; at most one pass per zone.
	var cappedShare, free float64
	for range st.zones {
		cappedShare, free = 0, 0
		for i := range st.zones {
			z := &st.zones[i]
			if z.capped {
				cappedShare += z.limit / issued
			} else {
				free += z.capacity
			}
		}
		if cappedShare >= 1 || free <= 0 {
			return total // the limits cannot all hold: leave the shares as they are
		}
		more := false
		for i := range st.zones {
			z := &st.zones[i]
			if !z.capped && z.limit > 0 && z.capacity/free*(1-cappedShare) > z.limit/issued {
				z.capped, more = true, true
			}
		}
		if !more {
			break
		}
	}
	if cappedShare == 0 {
		return total
	}
	newTotal := free / (1 - cappedShare)
	for i := range st.zones {
		z := &st.zones[i]
		if !z.capped || z.trusted == 0 {
			continue
		}
		z.capacity = z.limit / issued * newTotal
		z.health = max(c.p.floor, z.capacity/z.trusted)
		z.capacity = z.trusted * z.health
		if z.hidx >= 0 {
			st.health[z.hidx].h = z.health
		}
	}
	newTotal = 0
	for i := range st.zones {
		newTotal += st.zones[i].capacity
	}
	return newTotal
}
