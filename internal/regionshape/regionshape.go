// Package regionshape is the shape of the region of issue 31 (a replica's
// share of a mesh of two million nodes): how many endpoints each of its
// services has. The scale bench (e2e/bench/scale) builds the region from
// it and the weights benchmarks plan over it, so both measure one region.
package regionshape

// Sizes returns the endpoint count of each of services services, summing
// to endpoints. Real fleets are skewed ("services from 1 to 10,000+
// endpoints"): the first service has 500 times the mean (10,000 at a mean
// of 20) once there are 1,000 services, one in 1,000 has 50 times the
// mean, one in 100 ten times, and the others share the rest evenly (at
// least 1 each). A region too small for the skew gets even sizes. The
// same arguments always give the same sizes.
func Sizes(endpoints, services int) []int {
	if services < 1 {
		return nil
	}
	mean := endpoints / services
	sizes := make([]int, services)
	left, plain := endpoints, 0
	for i := range sizes {
		switch {
		case i == 0 && services >= 1000:
			sizes[i] = 500 * mean
		case i%1000 == 1:
			sizes[i] = 50 * mean
		case i%100 == 2:
			sizes[i] = 10 * mean
		default:
			plain++
			continue
		}
		left -= sizes[i]
	}
	if plain == 0 || left < plain {
		for i := range sizes {
			sizes[i] = endpoints / services
			if i < endpoints%services {
				sizes[i]++
			}
		}
		return sizes
	}
	each, extra := left/plain, left%plain
	for i := range sizes {
		if sizes[i] != 0 {
			continue
		}
		sizes[i] = each
		if extra > 0 {
			sizes[i]++
			extra--
		}
	}
	return sizes
}
