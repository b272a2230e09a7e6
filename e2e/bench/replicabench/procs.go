package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
)

// The child processes are package benchproc's (shared with
// e2e/bench/consistency).
type proc = benchproc.Proc

var (
	startProc = benchproc.Start
	freeAddr  = benchproc.FreeAddr
)

// scrape reads a Prometheus text exposition at url and returns the sum of
// every sample of each wanted metric name (all label sets added up). A name
// that is absent is absent from the map.
func scrape(url string, names ...string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m, err := parseMetrics(resp.Body, names...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return m, nil
}

// parseMetrics sums, per wanted name, every sample of a Prometheus text
// exposition read from r.
func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
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

// forceGC asks a spillway started with --pprof to run a GC: the heap
// profile handler with gc=1 calls runtime.GC before writing the profile.
func forceGC(httpAddr string) error {
	resp, err := http.Get("http://" + httpAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New("GET /debug/pprof/heap?gc=1: " + resp.Status)
	}
	return nil
}
