package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"syscall"
	"testing"
	"time"
)

// demo is one `spillway demo` process on free loopback ports.
type demo struct {
	t                           *testing.T
	httpAddr, grpcAddr, dnsAddr string
	token                       string // the admin token it printed
	uiURL                       string // the URL it printed
	started                     time.Time

	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// tokenLine is the line `spillway demo` prints once it serves.
var tokenLine = regexp.MustCompile(`spillway demo: open (http://\S+) \(admin token: (\S+)\)`)

// demoArgs are the flags that move a demo to free loopback ports.
func demoArgs(t *testing.T) (httpAddr, grpcAddr, dnsAddr string, args []string) {
	httpAddr, grpcAddr, dnsAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	return httpAddr, grpcAddr, dnsAddr, []string{"--http-addr", httpAddr, "--grpc-addr", grpcAddr, "--dns-addr", dnsAddr}
}

// startDemo starts `spillway demo` (the binary TestMain built) with extra
// flags and waits (bounded) for it to print its URL and token and answer
// /readyz.
func startDemo(t *testing.T, extra ...string) *demo {
	t.Helper()
	d := &demo{t: t}
	var args []string
	d.httpAddr, d.grpcAddr, d.dnsAddr, args = demoArgs(t)
	d.cmd = exec.Command(bin.spillway, append(append([]string{"demo"}, args...), extra...)...)
	d.start()
	d.waitReady(60 * time.Second)
	return d
}

func (d *demo) start() {
	d.t.Helper()
	d.logs = &syncBuffer{}
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // `go run` has a child: signal the group
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.done = make(chan struct{})
	go func() {
		d.cmd.Wait()
		close(d.done)
	}()
	d.t.Cleanup(d.stop)
}

// waitReady waits for the URL line and a 200 from /readyz.
func (d *demo) waitReady(limit time.Duration) {
	d.t.Helper()
	deadline := d.started.Add(limit)
	for {
		select {
		case <-d.done:
			d.t.Fatalf("spillway demo exited before ready:\n%s", d.logs)
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("spillway demo not ready after %v:\n%s", limit, d.logs)
		}
		if d.token == "" {
			if m := tokenLine.FindStringSubmatch(d.logs.String()); m != nil {
				d.uiURL, d.token = m[1], m[2]
			}
		}
		if d.token != "" {
			if resp, err := http.Get(d.url("/readyz")); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGINT (Ctrl-C) to the demo's process group and waits for it
// to exit, then SIGKILL if it has not within 30 s.
func (d *demo) stop() {
	if d.cmd.Process == nil {
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	pgid := d.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGINT)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.t.Errorf("spillway demo did not stop within 30s of SIGINT:\n%s", d.logs)
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-d.done
	}
}

func (d *demo) url(path string) string { return "http://" + d.httpAddr + path }

// getJSON GETs path on an HTTP address into v, failing the test on any
// error or a status other than 200.
func getJSON(t *testing.T, httpAddr, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: decoding: %v", path, err)
	}
}

// serviceNames lists the registry's services (GET /v1/services), sorted.
func serviceNames(t *testing.T, httpAddr string) []string {
	t.Helper()
	var resp struct {
		Services []struct {
			Name string `json:"name"`
		} `json:"services"`
	}
	getJSON(t, httpAddr, "/v1/services", &resp)
	var out []string
	for _, s := range resp.Services {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return out
}

// flows is a flow matrix: client zone → upstream zone → share in percent.
type flows map[string]map[string]float64

func (f flows) String() string {
	var keys []string
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, from := range keys {
		var tos []string
		for to := range f[from] {
			tos = append(tos, to)
		}
		sort.Strings(tos)
		s += from + ":"
		for _, to := range tos {
			s += fmt.Sprintf(" %s=%.2f", to, f[from][to])
		}
		s += "; "
	}
	return s
}

// loadJSON is the part of GET /v1/load the flow matrix is computed from.
type loadJSON struct {
	Time string `json:"time"`
	Rows []struct {
		ClientZone string `json:"client_zone"`
		Locality   struct {
			Zone string `json:"zone"`
		} `json:"locality"`
		IssuedRPS float64 `json:"issued_rps"`
	} `json:"rows"`
}

// weightsJSON is the part of GET /v1/weights the planned matrix is
// computed from.
type weightsJSON struct {
	Time   string `json:"time"`
	Routes []struct {
		ClientZone string `json:"client_zone"`
		Weights    []struct {
			Zone   string `json:"zone"`
			Weight uint32 `json:"weight"`
		} `json:"weights"`
	} `json:"routes"`
}

// measuredFlows is docs/ui.md's measured matrix: for each client zone,
// the share (percent) of its issued requests (LRS issued_rps, summed over
// client services) that went to each upstream zone:
//
//	measured[i][j] = 100 * sum(issued_rps | client_zone=i, locality.zone=j)
//	                     / sum(issued_rps | client_zone=i)
//
// Client zones that issued nothing are left out.
func measuredFlows(l loadJSON) flows {
	sum := map[string]map[string]float64{}
	total := map[string]float64{}
	for _, r := range l.Rows {
		if sum[r.ClientZone] == nil {
			sum[r.ClientZone] = map[string]float64{}
		}
		sum[r.ClientZone][r.Locality.Zone] += r.IssuedRPS
		total[r.ClientZone] += r.IssuedRPS
	}
	return percent(sum, total)
}

// plannedFlows is docs/ui.md's planned matrix: for each client zone's
// route (the route of clients that give no zone, "", too), the locality
// weights pushed to it, as a percentage of their sum:
//
//	planned[i][j] = 100 * weight(client_zone=i, zone=j) / sum_j weight
func plannedFlows(w weightsJSON) flows {
	sum := map[string]map[string]float64{}
	total := map[string]float64{}
	for _, r := range w.Routes {
		for _, z := range r.Weights {
			if sum[r.ClientZone] == nil {
				sum[r.ClientZone] = map[string]float64{}
			}
			sum[r.ClientZone][z.Zone] += float64(z.Weight)
			total[r.ClientZone] += float64(z.Weight)
		}
	}
	return percent(sum, total)
}

// percent divides each row of sum by its total, in percent; rows with a
// zero total are left out.
func percent(sum map[string]map[string]float64, total map[string]float64) flows {
	out := flows{}
	for from, tos := range sum {
		if total[from] <= 0 {
			continue
		}
		out[from] = map[string]float64{}
		for to, v := range tos {
			out[from][to] = 100 * v / total[from]
		}
	}
	return out
}

// sameFlows says whether a matrix read from the page (one decimal) is
// want rounded: every cell within the rounding (0.05), the same cells
// present except that a page may show 0.0 for a cell the JSON lacks.
func sameFlows(page, want flows) error {
	const tol = 0.05 + 1e-9
	for from, tos := range want {
		for to, v := range tos {
			got, ok := page[from][to]
			if !ok {
				if v < tol {
					continue
				}
				return fmt.Errorf("cell %s→%s missing on the page, want %.2f", from, to, v)
			}
			if d := got - v; d > tol || d < -tol {
				return fmt.Errorf("cell %s→%s = %.1f, want %.2f (±0.05)", from, to, got, v)
			}
		}
	}
	for from, tos := range page {
		for to, got := range tos {
			if _, ok := want[from][to]; !ok && got != 0 {
				return fmt.Errorf("cell %s→%s = %.1f on the page, absent from the JSON", from, to, got)
			}
		}
	}
	return nil
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o600) }
