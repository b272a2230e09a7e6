package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/e2e/bench/xdsbench/internal/benchdata"
	"github.com/spillway/spillway/registry/registryv1"
)

// server is one server process under test, started by the driver.
type server struct {
	name     string
	adsAddr  string
	httpAddr string // baseline: /change, /readyz, /debug/pprof/; spillway: /debug/pprof/ with --pprof
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once the process has exited
	waitErr  error         // set before exited is closed

	// change makes one endpoint change and returns once the server has
	// accepted it (the RPC or HTTP call returned).
	change func(ctx context.Context, c benchdata.Change) error
	// admin is spillway's admin API on its gRPC address (the subsets
	// its plans give); nil for the baseline.
	admin adminv1.AdminClient
	// cleanup releases the driver's side (connections); run by stop.
	cleanup []func()
}

// readyLimit bounds a server's start, data set loaded: a million
// endpoints take spillway's static load and the baseline's snapshot
// building tens of seconds on a busy machine.
const readyLimit = 3 * time.Minute

// freeAddr returns a loopback TCP address nothing listens on right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startProcess runs bin with args, its output going to logPath.
func startProcess(name, bin string, args, env []string, logPath string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	// The server dies with the driver, even if the driver is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	return s, nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// alive returns an error, with the tail of the server's log, if it has
// exited.
func (s *server) alive() error {
	select {
	case <-s.exited:
		return fmt.Errorf("%s exited (%v); last log lines:\n%s", s.name, s.waitErr, tail(s.logPath, 15))
	default:
		return nil
	}
}

// stop releases the driver's connections and ends the process: SIGTERM,
// then SIGKILL after 5 s.
func (s *server) stop() {
	for _, f := range s.cleanup {
		f()
	}
	s.cleanup = nil
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitReady polls ready every 100 ms for at most limit, failing early if
// the process exits.
func (s *server) waitReady(ctx context.Context, limit time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	var err error
	for time.Now().Before(deadline) {
		if aerr := s.alive(); aerr != nil {
			return aerr
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err = ready(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %v: %w; last log lines:\n%s", s.name, limit, err, tail(s.logPath, 15))
}

// startSpillway runs the spillway binary with registrations in memory and
// leases of an hour, and registers every endpoint through the registry API,
// or, given a static file (writeStaticFile), loads the data set from it
// (--static-file: a million endpoints load in seconds, where a million
// Register calls take minutes); the changes register and deregister either
// way. With withPprof, it serves /debug/pprof/ (its --pprof) on its HTTP
// address, a free loopback address. extra are more flags of spillway's
// (--weights-interval, --service-config-dir).
func startSpillway(ctx context.Context, bin, dir string, services []benchdata.Service, staticFile string, withPprof bool, extra ...string) (_ *server, err error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr := "127.0.0.1:0"
	pprofAddr := ""
	extra = slices.Clone(extra)
	if withPprof {
		if pprofAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		httpAddr = pprofAddr
		extra = append(extra, "--pprof")
	}
	if staticFile != "" {
		extra = append(extra, "--static-file", staticFile)
	}
	// spillway's --grpc-max-streams-per-identity stays at its default:
	// the fleet dials every connection from its own loopback address
	// (sourceAddr), one anonymous identity each, as hosts would.
	s, err := startProcess("spillway", bin, append([]string{
		"--data-dir", "", "--lease-ttl", "1h",
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--dns-addr", "127.0.0.1:0",
		"--log-level", "warn",
	}, extra...), nil, filepath.Join(dir, "spillway.log"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	s.adsAddr, s.httpAddr = grpcAddr, pprofAddr
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return s, err
	}
	s.cleanup = append(s.cleanup, func() { cc.Close() })
	s.admin = adminv1.NewAdminClient(cc)
	reg := registryv1.NewRegistryClient(cc)
	if err := s.waitReady(ctx, readyLimit, func(ctx context.Context) error {
		_, err := reg.ListServices(ctx, &registryv1.ListServicesRequest{})
		return err
	}); err != nil {
		return s, err
	}

	// leases maps an endpoint address to its lease; written by the loader,
	// then only by change, which the driver calls from one goroutine.
	var mu sync.Mutex
	leases := map[netip.Addr]string{}
	register := func(ctx context.Context, svc string, e benchdata.Endpoint) error {
		resp, err := reg.Register(ctx, &registryv1.RegisterRequest{
			Service: svc,
			Endpoint: &registryv1.Endpoint{
				Id:       e.ID,
				Address:  e.Address.String(),
				Ports:    []*registryv1.Port{{Name: benchdata.PortName, Number: benchdata.Port}},
				Locality: &registryv1.Locality{Region: benchdata.Region, Zone: e.Zone},
			},
		})
		if err != nil {
			return fmt.Errorf("register %s %s: %w", svc, e.Address, err)
		}
		mu.Lock()
		leases[e.Address] = resp.GetLeaseId()
		mu.Unlock()
		return nil
	}
	type job struct {
		svc string
		e   benchdata.Endpoint
	}
	jobs := make(chan job)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	workers := 8
	if staticFile != "" {
		workers = 0 // the static file holds the data set
		close(jobs)
	}
	for range workers {
		wg.Go(func() {
			var first error
			for j := range jobs {
				if first == nil {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					first = register(cctx, j.svc, j.e)
					cancel()
				}
			}
			errs <- first
		})
	}
	if staticFile == "" {
		for _, svc := range services {
			for _, e := range svc.Endpoints {
				jobs <- job{svc.Name, e}
			}
		}
		close(jobs)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	if err != nil {
		return s, err
	}
	// Check that spillway holds exactly the data set.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := reg.ListServices(cctx, &registryv1.ListServicesRequest{})
	if err != nil {
		return s, fmt.Errorf("list services: %w", err)
	}
	got := map[string]uint32{}
	for _, sum := range list.GetServices() {
		got[sum.GetName()] = sum.GetEndpoints()
	}
	for _, svc := range services {
		if got[svc.Name] != uint32(len(svc.Endpoints)) {
			return s, fmt.Errorf("spillway lists %d endpoints for %s after loading, want %d", got[svc.Name], svc.Name, len(svc.Endpoints))
		}
	}
	if len(got) != len(services) {
		return s, fmt.Errorf("spillway lists %d services after loading, want %d", len(got), len(services))
	}

	s.change = func(ctx context.Context, c benchdata.Change) error {
		svc := services[c.Service].Name
		if c.Add {
			return register(ctx, svc, c.Endpoint)
		}
		mu.Lock()
		lease, ok := leases[c.Endpoint.Address]
		mu.Unlock()
		if !ok {
			return fmt.Errorf("no lease for %s %s", svc, c.Endpoint.Address)
		}
		if _, err := reg.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: lease}); err != nil {
			return fmt.Errorf("deregister %s %s: %w", svc, c.Endpoint.Address, err)
		}
		return nil
	}
	return s, nil
}

// writeStaticFile writes services as a spillway --static-file into dir
// and returns its path: every endpoint with its id, address, port and
// zone, in benchdata.Region.
func writeStaticFile(dir string, services []benchdata.Service) (string, error) {
	path := filepath.Join(dir, "static.yaml")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(w, "services:")
	for _, s := range services {
		fmt.Fprintf(w, "  - name: %s\n    endpoints:\n", s.Name)
		for _, e := range s.Endpoints {
			fmt.Fprintf(w, "      - {id: %s, address: %s, ports: [\"%s=%d\"], zone: %s, region: %s}\n",
				e.ID, e.Address, benchdata.PortName, benchdata.Port, e.Zone, benchdata.Region)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, f.Close()
}

// startBaseline runs the baseline binary (e2e/bench/xdsbench/baseline),
// which builds the same data set itself (from --data, or from the three
// numbers), with a SnapshotCache (target "baseline") or LinearCaches
// (linearTarget; linearSameTarget with --same-content, spillway's content
// in the assignments).
func startBaseline(ctx context.Context, cfg *config, target, dir string, services []benchdata.Service, withPprof bool) (_ *server, err error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr}
	if cfg.dataFile != "" {
		args = append(args, "--data", cfg.dataFile)
	} else {
		args = append(args, "--services", fmt.Sprint(cfg.services), "--endpoints", fmt.Sprint(cfg.endpoints), "--zones", fmt.Sprint(cfg.zones))
	}
	if target == linearTarget || target == linearSameTarget {
		args = append(args, "--cache", "linear")
	}
	if target == linearSameTarget {
		args = append(args, "--same-content")
	}
	if withPprof {
		args = append(args, "--pprof")
	}
	s, err := startProcess(target, cfg.baselineBin, args, nil, filepath.Join(dir, target+".log"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	s.adsAddr, s.httpAddr = grpcAddr, httpAddr
	hc := &http.Client{Timeout: 60 * time.Second}
	s.cleanup = append(s.cleanup, hc.CloseIdleConnections)
	base := "http://" + httpAddr
	call := func(ctx context.Context, method, path string) error {
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
	if err := s.waitReady(ctx, readyLimit, func(ctx context.Context) error {
		return call(ctx, http.MethodGet, "/readyz")
	}); err != nil {
		return s, err
	}
	s.change = func(ctx context.Context, c benchdata.Change) error {
		q := url.Values{"service": {services[c.Service].Name}, "address": {c.Endpoint.Address.String()}}
		if c.Add {
			q.Set("op", "add")
			q.Set("id", c.Endpoint.ID)
			q.Set("zone", c.Endpoint.Zone)
		} else {
			q.Set("op", "remove")
		}
		return call(ctx, http.MethodPost, "/change?"+q.Encode())
	}
	return s, nil
}

// stackInuse returns the server's runtime.MemStats.StackInuse and
// HeapInuse, read from the text heap profile (/debug/pprof/heap?debug=1,
// its "# Stack = inuse / sys" and "# HeapInuse = n" lines). With gc, the
// request has the server run one runtime.GC first (?gc=1), during which
// the runtime shrinks stacks under 1/4 used.
func (s *server) stackInuse(ctx context.Context, gc bool) (stack, heap int64, err error) {
	path := "heap?debug=1"
	if gc {
		path += "&gc=1"
	}
	b, err := s.getPprof(ctx, path)
	if err != nil {
		return 0, 0, err
	}
	if stack, err = parseStackInuse(b); err != nil {
		return 0, 0, err
	}
	heap, err = parseHeapInuse(b)
	return stack, heap, err
}

// parseHeapInuse finds "# HeapInuse = <n>" in a text heap profile.
func parseHeapInuse(b []byte) (int64, error) {
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapInuse = "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("heap profile: HeapInuse line %q: %w", l, err)
			}
			return n, nil
		}
	}
	return 0, errors.New("heap profile: no \"# HeapInuse = \" line")
}

// parseStackInuse finds "# Stack = <inuse> / <sys>" in a text heap profile.
func parseStackInuse(b []byte) (int64, error) {
	for l := range strings.SplitSeq(string(b), "\n") {
		v, ok := strings.CutPrefix(l, "# Stack = ")
		if !ok {
			continue
		}
		inuse, _, _ := strings.Cut(v, " ")
		n, err := strconv.ParseInt(inuse, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("heap profile: Stack line %q: %w", l, err)
		}
		return n, nil
	}
	return 0, errors.New("heap profile: no \"# Stack = \" line")
}

// getPprof returns the body of http://<httpAddr>/debug/pprof/<path>.
func (s *server) getPprof(ctx context.Context, path string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+s.httpAddr+"/debug/pprof/"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pprof %s: %s", path, resp.Status)
	}
	return b, nil
}

// savePprof fetches http://<httpAddr>/debug/pprof/<path> into file.
func (s *server) savePprof(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: %s", path, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
