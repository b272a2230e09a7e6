package benchdata

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// A data file holds a data set of any shape (the region of issue 31:
// tens of thousands of services of skewed sizes, e2e/bench/scale), where
// Services builds only even ones. It is text, one endpoint a line, four
// fields separated by tabs:
//
//	SERVICE	ID	ADDRESS	ZONE
//
// A service's endpoints are on consecutive lines; services keep the
// order of their first line. The driver and the baseline read the same
// file, so both serve exactly the same endpoints.

// WriteFile writes services to path in the data file format.
func WriteFile(path string, services []Service) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for _, s := range services {
		for _, e := range s.Endpoints {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, e.ID, e.Address, e.Zone)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// ReadFile reads a data file: its services and its zones, sorted.
func ReadFile(path string) ([]Service, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var out []Service
	index := map[string]int{}
	zones := map[string]bool{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 4 {
			return nil, nil, fmt.Errorf("%s:%d: %d fields, want 4 (service, id, address, zone)", path, line, len(fields))
		}
		addr, err := netip.ParseAddr(fields[2])
		if err != nil {
			return nil, nil, fmt.Errorf("%s:%d: address: %w", path, line, err)
		}
		i, ok := index[fields[0]]
		if !ok {
			i = len(out)
			index[fields[0]] = i
			out = append(out, Service{Name: fields[0]})
		}
		out[i].Endpoints = append(out[i].Endpoints, Endpoint{ID: fields[1], Address: addr, Zone: fields[3]})
		zones[fields[3]] = true
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("%s: no endpoints", path)
	}
	zs := make([]string, 0, len(zones))
	for z := range zones {
		zs = append(zs, z)
	}
	slices.Sort(zs)
	return out, zs, nil
}

// Spread gives each of k streams a service, in proportion to the
// services' endpoint counts: a service with more endpoints serves more
// traffic and has more clients. Counts are rounded by largest remainder
// (ties to the earlier service), so they sum to k and a service of less
// than one stream's share may get none. The streams of a service are
// consecutive: out[i] is the service of stream i.
func Spread(services []Service, k int) []int {
	total := 0
	for _, s := range services {
		total += len(s.Endpoints)
	}
	counts := make([]int, len(services))
	rem := make([]int, len(services)) // remainder numerators, in units of 1/total
	given := 0
	for i, s := range services {
		n := len(s.Endpoints) * k
		counts[i], rem[i] = n/total, n%total
		given += counts[i]
	}
	order := make([]int, len(services))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return rem[b] - rem[a] })
	for _, i := range order[:k-given] {
		counts[i]++
	}
	out := make([]int, 0, k)
	for i, c := range counts {
		for range c {
			out = append(out, i)
		}
	}
	return out
}

// PairPlan returns m changes (m even) in pairs on one service each: change
// 2j adds a new endpoint (add-<j> at 10.250.x.y, zones round-robin) to the
// service of stream (j*stride)%k, change 2j+1 removes it again. A change's
// service is so drawn in proportion to its streams, hence to its
// endpoints, as churn is; a service is drawn at most once. Removing only
// endpoints the driver added keeps the loaded data set (which spillway
// holds from its static file) untouched. streamSvc is what Spread gave.
func PairPlan(services []Service, zones []string, streamSvc []int, m int) ([]Change, error) {
	k := len(streamSvc)
	if m < 2 || m%2 != 0 {
		return nil, fmt.Errorf("--changes: %d, want an even number >= 2 (add and remove pairs)", m)
	}
	stride := 7919 // a prime: visits every stream for k not a multiple of it
	for gcd(stride, k) != 1 {
		stride += 2
	}
	used := map[int]bool{}
	var out []Change
	for j, probe := 0, 0; len(out) < m; probe++ {
		if probe >= k {
			return nil, fmt.Errorf("--changes: %d, but the streams are on only %d services", m, len(used))
		}
		svc := streamSvc[(probe*stride)%k]
		if used[svc] {
			continue
		}
		used[svc] = true
		e := Endpoint{
			ID:      fmt.Sprintf("add-%d", j),
			Address: netip.AddrFrom4([4]byte{10, 250, byte(j / 250), byte(j%250 + 1)}),
			Zone:    zones[j%len(zones)],
		}
		out = append(out,
			Change{Seq: 2 * j, Service: svc, Add: true, Endpoint: e},
			Change{Seq: 2*j + 1, Service: svc, Add: false, Endpoint: e})
		j++
	}
	return out, nil
}
