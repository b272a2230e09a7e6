package clientlib_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/clientlib"
)

// childReport is what a child process prints, as one JSON line.
type childReport struct {
	Channel, Reason, Detail, Bootstrap, NodeID string
	OK                                         int
	Err                                        string
	// GRPCState is the state of a plain xds:/// channel made after the
	// child set the bootstrap variable itself (mode "setenv").
	GRPCState string
}

// Variables the parent gives a child.
const (
	childDNS     = "CLIENTLIB_TEST_DNS"
	childRollout = "CLIENTLIB_TEST_ROLLOUT"
	childXDS     = "CLIENTLIB_TEST_XDS"
)

// runChild is the child's main. Mode "process": Dial with the process
// bootstrap from the environment, wait for xDS, make RPCs, report, and
// hold the Conn until stdin closes. Mode "setenv": started without a
// bootstrap, set $GRPC_XDS_BOOTSTRAP_CONFIG, then Dial and dial xds:///
// with grpc-go's default resolver, and report what became of both.
func runChild(mode string) int {
	var r childReport
	defer func() { json.NewEncoder(os.Stdout).Encode(r) }()
	if mode == "setenv" {
		b, err := clientlib.BootstrapJSON(clientlib.WithService("setenv-caller"), clientlib.WithControlPlane(os.Getenv(childXDS)))
		if err != nil {
			r.Err = err.Error()
			return 1
		}
		os.Setenv(clientlib.EnvBootstrapConfig, string(b))
		cc, err := grpc.NewClient("xds:///"+testService, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			r.Err = err.Error()
			return 1
		}
		defer cc.Close()
		cc.Connect()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for s := cc.GetState(); s != connectivity.Ready && s != connectivity.TransientFailure && cc.WaitForStateChange(ctx, s); s = cc.GetState() {
		}
		r.GRPCState = cc.GetState().String()
	}
	c, err := clientlib.Dial(context.Background(), testService,
		clientlib.WithService(os.Getenv("CLIENTLIB_TEST_SERVICE")), clientlib.WithZone("zone-c"), clientlib.WithRegion("r1"),
		clientlib.WithDNSServer(os.Getenv(childDNS)), clientlib.WithControlPlane(os.Getenv(childXDS)),
		clientlib.WithRolloutURL(""), clientlib.WithRolloutFile(os.Getenv(childRollout)),
		clientlib.WithPanicPollInterval(pollInterval), clientlib.WithXDSTimeout(5*time.Second))
	if err != nil {
		r.Err = err.Error()
		return 1
	}
	defer c.Close()
	want := clientlib.XDS
	if mode == "setenv" {
		want = clientlib.DNS
	}
	waitFor(10*time.Second, func() bool {
		s := c.Status()
		return s.Channel == want && s.Reason != clientlib.ReasonStarting && s.Reason != clientlib.ReasonSwitching
	})
	hc := healthpb.NewHealthClient(c)
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			r.OK++
		} else {
			r.Err = err.Error()
		}
		cancel()
	}
	s := c.Status()
	r.Channel, r.Reason, r.Detail, r.Bootstrap, r.NodeID = s.Channel.String(), string(s.Reason), s.Detail, s.Bootstrap, s.NodeID
	if mode == "process" {
		json.NewEncoder(os.Stdout).Encode(r)
		r = childReport{Err: "sent"} // the deferred line, after stdin closes
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	return 0
}

// startChild runs the test binary as a child in mode with env added to
// an environment without grpc-go's bootstrap variables.
func startChild(t *testing.T, mode string, env ...string) (*exec.Cmd, *bufio.Reader, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, clientlib.EnvBootstrapFile+"=") && !strings.HasPrefix(kv, clientlib.EnvBootstrapConfig+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append([]string{childEnv + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %s: %v", mode, err)
		}
	}
	return cmd, bufio.NewReader(stdout), done
}

func readReport(t *testing.T, r *bufio.Reader) childReport {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("child report: %v (%q)", err, line)
	}
	var rep childReport
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		t.Fatalf("child report %q: %v", line, err)
	}
	return rep
}

// TestProcessBootstrap: without WithPerConnBootstrap, a Conn's xDS
// channel is grpc-go's default xds:/// resolver with the process's
// bootstrap, here $GRPC_XDS_BOOTSTRAP_CONFIG as BootstrapJSON wrote it:
// the control plane sees that node id and zone, and RPCs flow over xDS.
func TestProcessBootstrap(t *testing.T) {
	e := newEnv(t)
	bs, err := clientlib.BootstrapJSON(clientlib.WithService("proc-caller"), clientlib.WithZone("zone-c"),
		clientlib.WithRegion("r1"), clientlib.WithControlPlane(e.xdsAddr))
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Node struct {
			ID string `json:"id"`
		} `json:"node"`
	}
	if err := json.Unmarshal(bs, &parsed); err != nil || !strings.HasPrefix(parsed.Node.ID, "proc-caller~") {
		t.Fatalf("BootstrapJSON = %s (%v), want node id proc-caller~...", bs, err)
	}
	_, out, done := startChild(t, "process", clientlib.EnvBootstrapConfig+"="+string(bs), "CLIENTLIB_TEST_SERVICE=proc-caller",
		childDNS+"="+e.dnsAddr, childXDS+"="+e.xdsAddr, childRollout+"="+e.rollout(100))
	defer done()
	r := readReport(t, out)
	want := childReport{Channel: "xds", Reason: string(clientlib.ReasonFlagOn), Bootstrap: "env:" + clientlib.EnvBootstrapConfig, NodeID: parsed.Node.ID, OK: 20}
	if r.Channel != want.Channel || r.Reason != want.Reason || r.Bootstrap != want.Bootstrap || r.NodeID != want.NodeID || r.OK != want.OK {
		t.Errorf("child = %+v, want %+v", r, want)
	}
	var seen []string
	for _, s := range e.xds.Subscriptions() {
		seen = append(seen, fmt.Sprintf("%s/%s/%s", s.NodeID, s.ClientService, s.Zone))
	}
	if w := parsed.Node.ID + "/proc-caller/zone-c"; len(seen) == 0 || strings.Count(strings.Join(seen, " "), w) != len(seen) {
		t.Errorf("xds streams %v, want only %s", seen, w)
	}
}

// TestPerConnBootstrapPin pins what WithPerConnBootstrap and the choice
// of the process bootstrap rest on, so that a grpc-go upgrade that changes
// it fails here, loudly:
//   - the grpc-go version is the one this was checked against;
//   - NewXDSResolverWithConfigForTesting gives each channel its own
//     identity: two Conns in one process, two node ids and zones;
//   - grpc-go reads $GRPC_XDS_BOOTSTRAP_CONFIG when the process starts:
//     set later (as the library would have to), its default resolver does
//     not see it, and neither does clientlib, which then stays on DNS.
func TestPerConnBootstrapPin(t *testing.T) {
	const pinned = "v1.85.0"
	// The version the module requires (test binaries carry no
	// dependency versions in their build info).
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, l := range strings.Split(string(mod), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "google.golang.org/grpc" {
			got = f[1]
		}
	}
	if got != pinned {
		t.Errorf("grpc-go is %q, clientlib's bootstrap handling was checked against %s: re-read grpc-go's xds/xds.go "+
			"(NewXDSResolverWithConfigForTesting) and internal/envconfig (bootstrap variables read at init), "+
			"see whether a supported per-channel bootstrap exists now, update clientlib/doc.go, then this pin", got, pinned)
	}

	e := newEnv(t)
	file := e.rollout(100)
	a := e.dial("caller-a", clientlib.WithRolloutFile(file), clientlib.WithZone("zone-a"))
	b := e.dial("caller-b", clientlib.WithRolloutFile(file), clientlib.WithZone("zone-b"))
	for _, c := range []*clientlib.Conn{a, b} {
		if _, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
			t.Fatalf("not on xds: %+v", c.Status())
		}
		if s := c.Status(); s.Bootstrap != "per-conn" {
			t.Errorf("bootstrap %q, want per-conn", s.Bootstrap)
		}
	}
	zones := map[string]string{}
	for _, s := range e.xds.Subscriptions() {
		zones[s.NodeID] = s.ClientService + "/" + s.Zone
	}
	want := map[string]string{a.Status().NodeID: "caller-a/zone-a", b.Status().NodeID: "caller-b/zone-b"}
	if fmt.Sprint(zones) != fmt.Sprint(want) {
		t.Errorf("control plane saw %v, want %v: NewXDSResolverWithConfigForTesting no longer gives a channel its own bootstrap", zones, want)
	}

	_, out, done := startChild(t, "setenv", "CLIENTLIB_TEST_SERVICE=setenv-caller",
		childDNS+"="+e.dnsAddr, childXDS+"="+e.xdsAddr, childRollout+"="+file)
	r := readReport(t, out)
	done()
	if r.GRPCState != connectivity.TransientFailure.String() {
		t.Errorf("an xds:/// channel after setting $%s in the process is %s, want TRANSIENT_FAILURE (%+v): "+
			"grpc-go now reads the bootstrap later than process start, so clientlib could set it itself", clientlib.EnvBootstrapConfig, r.GRPCState, r)
	}
	if r.Channel != "dns" || r.Reason != string(clientlib.ReasonXDSUnavailable) || r.OK != 20 || !strings.Contains(r.Detail, clientlib.EnvBootstrapConfig) {
		t.Errorf("clientlib without a process bootstrap = %+v, want on dns (%s, naming $%s), 20 RPCs ok", r, clientlib.ReasonXDSUnavailable, clientlib.EnvBootstrapConfig)
	}
}
