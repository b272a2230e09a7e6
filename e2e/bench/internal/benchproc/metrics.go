package benchproc

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// scrapeClient bounds a /metrics read: generous, since a replica holding
// 100,000 leases answers slowly on a loaded machine, but never unbounded.
var scrapeClient = &http.Client{Timeout: 10 * time.Second}

// Scrape reads a Prometheus text exposition at url and returns the sum of
// every sample of each wanted metric name (all label sets added up). A name
// that is absent is absent from the map.
func Scrape(url string, names ...string) (map[string]float64, error) {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m, err := ParseMetrics(resp.Body, names...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return m, nil
}

// ParseMetrics sums, per wanted name, every sample of a Prometheus text
// exposition read from r.
func ParseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			// Labels may hold spaces: the value follows the closing brace.
			name = line[:i]
			j := strings.LastIndexByte(line, '}')
			if j < 0 {
				continue
			}
			rest, ok = strings.TrimSpace(line[j+1:]), true
		}
		if !ok || !want[name] {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("metric %s: no value", name)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s value %q: %w", name, f[0], err)
		}
		out[name] += v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
