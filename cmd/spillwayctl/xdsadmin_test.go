package main

import (
	"context"
	"flag"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3lrsgrpc "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	v3lrspb "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway/spillway/admin"
	adminv1 "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/xdstest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")

// xdsStack is a real xDS server (ADS and LRS) and the admin API on one
// loopback gRPC port, as cmd/spillway wires them, plus a client connection
// for the test's own ADS and LRS streams.
type xdsStack struct {
	addr string
	conn *grpc.ClientConn
	ctx  context.Context // ends with the test, closing the streams
}

func startXDSStack(t *testing.T) *xdsStack {
	t.Helper()
	// The server records load only for services it has, and localities
	// where they have endpoints: payments in r1/zone-a and r1/zone-b.
	store := registry.NewStore()
	for i, zone := range []string{"zone-a", "zone-b"} {
		if _, err := store.Apply(registry.Upsert("payments", &registry.Endpoint{
			ID: zone, Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy, Source: registry.SourceStatic,
		})); err != nil {
			t.Fatal(err)
		}
	}
	// Not Run: the test needs only the answers to its own streams.
	srv := xdstest.Start(t, xds.Config{Store: store, Debounce: 100 * time.Millisecond, LRSInterval: 10 * time.Second},
		xdstest.WithoutRun(),
		xdstest.WithServices(func(g grpc.ServiceRegistrar, x *xds.Server) {
			a, err := admin.New(admin.Config{Loads: x.Loads(), Subscriptions: x, Plans: (*weights.Planner)(nil)})
			if err != nil {
				t.Fatal(err)
			}
			a.RegisterGRPC(g)
		}))
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { // before the server's: cleanups run last first
		cancel()
		conn.Close()
	})
	return &xdsStack{addr: srv.Addr, conn: conn, ctx: ctx}
}

func node(id, cluster, zone string) *v3corepb.Node {
	return &v3corepb.Node{Id: id, Cluster: cluster, Locality: &v3corepb.Locality{Region: "r1", Zone: zone}}
}

// subscribe opens an ADS stream for n asking for service's Listener, the
// way grpc-go opens one stream per target, and waits for the answer, after
// which the server holds the subscription.
func (s *xdsStack) subscribe(t *testing.T, n *v3corepb.Node, service string) {
	t.Helper()
	stream, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(s.conn).StreamAggregatedResources(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&v3discoverypb.DiscoveryRequest{
		Node:          n,
		TypeUrl:       "type.googleapis.com/envoy.config.listener.v3.Listener",
		ResourceNames: []string{service},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("ADS answer: %v", err)
	}
}

type localityLoad struct {
	zone                                string
	issued, succeeded, errored, pending uint64
}

// report opens an LRS stream for n and sends one report of a 10 s interval
// for service, then waits for the server's answer, which it sends after
// recording the report.
func (s *xdsStack) report(t *testing.T, n *v3corepb.Node, service string, loads ...localityLoad) {
	t.Helper()
	stream, err := v3lrsgrpc.NewLoadReportingServiceClient(s.conn).StreamLoadStats(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := &v3endpointpb.ClusterStats{ClusterName: service, LoadReportInterval: durationpb.New(10 * time.Second)}
	for _, l := range loads {
		cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &v3endpointpb.UpstreamLocalityStats{
			Locality:                &v3corepb.Locality{Region: "r1", Zone: l.zone},
			TotalIssuedRequests:     l.issued,
			TotalSuccessfulRequests: l.succeeded,
			TotalErrorRequests:      l.errored,
			TotalRequestsInProgress: l.pending,
		})
	}
	if err := stream.Send(&v3lrspb.LoadStatsRequest{Node: n, ClusterStats: []*v3endpointpb.ClusterStats{cs}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("LRS answer: %v", err)
	}
}

// TestCLILoadAndGraph drives load and graph in-process against a real xDS
// server fed by real ADS and LRS streams.
func TestCLILoadAndGraph(t *testing.T) {
	s := startXDSStack(t)
	c1, c2, anon := node("checkout-1", "checkout", "zone-a"), node("checkout-2", "checkout", "zone-b"), node("anon-1", "", "zone-a")
	s.subscribe(t, c1, "payments")
	s.subscribe(t, c1, "inventory")
	s.subscribe(t, c2, "payments")
	s.subscribe(t, anon, "payments")
	s.report(t, c1, "payments",
		localityLoad{zone: "zone-a", issued: 100, succeeded: 95, errored: 5, pending: 3},
		localityLoad{zone: "zone-b", issued: 25, succeeded: 25})
	s.report(t, c2, "payments", localityLoad{zone: "zone-b", issued: 20, succeeded: 20, pending: 1})

	t.Run("load", func(t *testing.T) {
		out := mustCtl(t, s.addr, "load", "payments")
		got := table(out)
		for i := range got[1:] {
			got[i+1] = got[i+1][:len(got[i+1])-2] // AGE ("0s ago") depends on the clock
		}
		want := [][]string{
			{"checkout", "zone-a", "→", "zone-a", "10/9.5/0.5", "3", "95", "1"},
			{"checkout", "zone-a", "→", "zone-b", "2.5/2.5/0", "0", "25", "1"},
			{"checkout", "zone-b", "→", "zone-b", "2/2/0", "1", "20", "1"},
		}
		if diff := cmp.Diff(want, got[1:]); diff != "" {
			t.Errorf("load payments rows (-want +got):\n%s\n%s", diff, out)
		}
		if h := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(h, " ") != "CLIENT-SERVICE CLIENT-ZONE → LOCALITY-ZONE RPS(ISSUED/OK/ERR) IN-FLIGHT TOTAL-OK REPORTERS AGE" {
			t.Errorf("load header = %q", h)
		}
		for _, row := range table(out)[1:] {
			if a := strings.Join(row[len(row)-2:], " "); a != "0s ago" && a != "1s ago" {
				t.Errorf("AGE = %q, want a report of the last second", a)
			}
		}
	})
	t.Run("load_json", func(t *testing.T) {
		out := mustCtl(t, s.addr, "load", "Payments", "-o", "json")
		var got adminv1.LoadResponse
		if err := protojson.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("load -o json is not a LoadResponse: %v\n%s", err, out)
		}
		if got.GetService() != "payments" || len(got.GetRows()) != 3 {
			t.Fatalf("load -o json: service %q with %d rows, want payments with 3:\n%s", got.GetService(), len(got.GetRows()), out)
		}
		want := &adminv1.LoadRow{
			ClientZone: "zone-a", ClientService: "checkout", Service: "payments",
			Locality:  &adminv1.Locality{Region: "r1", Zone: "zone-a"},
			IssuedRps: 10, SucceededRps: 9.5, ErroredRps: 0.5, InProgress: 3,
			TotalIssued: 100, TotalSucceeded: 95, TotalErrored: 5, Reporters: 1,
		}
		if diff := cmp.Diff(want, got.GetRows()[0], protocmp.Transform(), protocmp.IgnoreFields(&adminv1.LoadRow{}, "updated")); diff != "" {
			t.Errorf("first row (-want +got):\n%s", diff)
		}
		if up := got.GetRows()[0].GetUpdated().AsTime(); got.GetTime().AsTime().Sub(up) > time.Minute || up.After(got.GetTime().AsTime()) {
			t.Errorf("updated %v, answer time %v: want a report of the last minute", up, got.GetTime().AsTime())
		}
		for _, k := range []string{`"client_service"`, `"issued_rps"`, `"sub_zone"`} {
			if !strings.Contains(out, k) {
				t.Errorf("load -o json lacks %s (proto names, empty fields shown)", k)
			}
		}
	})
	t.Run("load_unknown_service", func(t *testing.T) {
		r := ctl(t, s.addr, "load", "nobody")
		if r.code != 0 || len(table(r.stdout)) != 1 || !strings.Contains(r.stderr, "no load reports for nobody") {
			t.Errorf("load nobody: exit %d, stdout %q, stderr %q; want 0, the header only and a note", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("graph", func(t *testing.T) {
		got := mustCtl(t, s.addr, "graph")
		want := "" +
			"(unknown) -> payments  0 rps     1 stream (zone-a)\n" +
			"checkout -> inventory  0 rps     1 stream (zone-a)\n" +
			"checkout -> payments   14.5 rps  2 streams (zone-a,zone-b)\n"
		if got != want {
			t.Errorf("graph =\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("graph_dot", func(t *testing.T) {
		got := mustCtl(t, s.addr, "graph", "-o", "dot")
		want := "digraph spillway {\n" +
			"  rankdir=LR;\n" +
			"  node [shape=box];\n" +
			`  "(unknown)" -> "payments" [label="0 rps, 1 stream (zone-a)", style=dashed];` + "\n" +
			`  "checkout" -> "inventory" [label="0 rps, 1 stream (zone-a)", style=dashed];` + "\n" +
			`  "checkout" -> "payments" [label="14.5 rps, 2 streams (zone-a,zone-b)"];` + "\n" +
			"}\n"
		if got != want {
			t.Errorf("graph -o dot =\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("graph_json", func(t *testing.T) {
		out := mustCtl(t, s.addr, "graph", "-o", "json")
		var got adminv1.GraphResponse
		if err := protojson.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("graph -o json is not a GraphResponse: %v\n%s", err, out)
		}
		want := []*adminv1.Edge{
			{ClientService: "", Service: "payments", Streams: 1, Nodes: 1, Zones: []string{"zone-a"}},
			{ClientService: "checkout", Service: "inventory", Streams: 1, Nodes: 1, Zones: []string{"zone-a"}},
			{ClientService: "checkout", Service: "payments", Streams: 2, Nodes: 2, Zones: []string{"zone-a", "zone-b"}, Rps: 14.5, ErroredRps: 0.5},
		}
		if diff := cmp.Diff(want, got.GetEdges(), protocmp.Transform()); diff != "" {
			t.Errorf("graph -o json edges (-want +got):\n%s", diff)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			code int
			want []string
		}{
			{"bad_service", []string{"load", "pay_ments"}, 1, []string{"spillwayctl load: service:", "not allowed", "(InvalidArgument)"}},
			{"no_service", []string{"load"}, 2, []string{"want SERVICE, got 0 arguments"}},
			{"two_services", []string{"load", "a", "b"}, 2, []string{"want SERVICE, got 2 arguments"}},
			{"load_bad_output", []string{"load", "payments", "-o", "dot"}, 2, []string{`-o "dot": want text or json`}},
			{"graph_bad_output", []string{"graph", "-o", "yaml"}, 2, []string{`-o "yaml": want text, json or dot`}},
			{"graph_argument", []string{"graph", "payments"}, 2, []string{`unexpected argument "payments"`}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := ctl(t, s.addr, tc.args...)
				if r.code != tc.code {
					t.Errorf("exit = %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
					}
				}
			})
		}
	})
	t.Run("server_down", func(t *testing.T) {
		r := ctl(t, "127.0.0.1:1", "graph")
		if r.code != 1 || !strings.Contains(r.stderr, "Unavailable") {
			t.Errorf("graph against nothing: exit %d, stderr %q; want 1 and Unavailable", r.code, r.stderr)
		}
	})
}

// TestGraphDOTGolden checks the Graphviz output against testdata/graph.dot:
// quoting of any client-chosen name, the unknown client, the wildcard,
// dashed edges without traffic.
func TestGraphDOTGolden(t *testing.T) {
	edges := []*adminv1.Edge{
		{ClientService: "", Service: "payments", Streams: 1, Nodes: 1, Zones: []string{""}},
		{ClientService: "batch", Service: "payments", Rps: 0.333},
		{ClientService: "checkout", Service: "payments", Streams: 3, Nodes: 2, Zones: []string{"zone-a", "zone-b"}, Rps: 12.5, ErroredRps: 0.5},
		{ClientService: "edge", Service: "*", Streams: 1, Nodes: 1, Zones: []string{"zone-a"}},
		{ClientService: `we"ird\name` + "\nx", Service: "payments.prod", Streams: 2, Nodes: 1, Zones: []string{"zone-c"}, Rps: 1200},
	}
	var b strings.Builder
	if err := writeGraphDOT(&b, edges); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "graph.dot")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/spillwayctl -run TestGraphDOTGolden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("graph -o dot differs from %s (-want +got):\n%s\nIf the change is intended, run go test ./cmd/spillwayctl -run TestGraphDOTGolden -update", golden, diff)
	}
	// Graphviz itself must accept it and draw every service: a graph
	// that only our golden file likes is no use to an SRE piping it to
	// dot. scripts/test-deps.sh installs Graphviz.
	path, err := exec.LookPath("dot")
	if err != nil {
		t.Fatalf("dot (Graphviz) not found: %v; scripts/test-deps.sh installs it (Debian package graphviz)", err)
	}
	cmd := exec.Command(path, "-Tsvg")
	cmd.Stdin = strings.NewReader(b.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	svg, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("dot -Tsvg rejects the graph: %v\n%s", err, stderr.String())
	}
	for _, name := range []string{"payments", "payments.prod", "checkout", "batch", "edge"} {
		if !strings.Contains(string(svg), ">"+name+"<") {
			t.Errorf("dot -Tsvg drew no node labelled %q:\n%s", name, svg)
		}
	}
}

func TestRate(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 12.5: "12.5", 0.333: "0.33", 1200: "1200", 0.004: "0", 2.006: "2.01"} {
		if got := rate(in); got != want {
			t.Errorf("rate(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadTableText(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	row := func(client, clientZone, region, zone, subZone string, rps float64, updated *timestamppb.Timestamp) *adminv1.LoadRow {
		return &adminv1.LoadRow{
			ClientService: client, ClientZone: clientZone, Service: "payments",
			Locality:  &adminv1.Locality{Region: region, Zone: zone, SubZone: subZone},
			IssuedRps: rps, SucceededRps: rps, InProgress: 2, TotalSucceeded: 42, Reporters: 1, Updated: updated,
		}
	}
	merged := func(clientZone, zone string, rps float64, reporters uint32) *adminv1.LoadRow {
		return &adminv1.LoadRow{ClientZone: clientZone, Service: "payments", Locality: &adminv1.Locality{Zone: zone},
			IssuedRps: rps, SucceededRps: rps, InProgress: 7, Reporters: reporters, Updated: timestamppb.New(now.Add(-time.Second))}
	}
	for _, tc := range []struct {
		name string
		rows []*adminv1.LoadRow
		resp *adminv1.LoadResponse // the rest of the answer; nil: none
		want string
	}{
		{
			name: "merged",
			rows: []*adminv1.LoadRow{merged("zone-a", "zone-a", 300, 4), merged("zone-b", "zone-a", 20, 2)},
			resp: &adminv1.LoadResponse{Merged: true, MergedFrom: []*adminv1.Contributor{{Replica: "r0", AgeSeconds: 0.4}, {Replica: "r1", AgeSeconds: 0.9}}},
			want: "" +
				"mesh-wide load, merged by this replica (the owner) from r0 (0.4s old), r1 (0.9s old)\n" +
				"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n" +
				"(all)           zone-a       →  zone-a         300/300/0           7          -         4          1s ago\n" +
				"(all)           zone-b       →  zone-a         20/20/0             7          -         2          1s ago\n",
		},
		{
			name: "merged_nothing_fresh",
			resp: &adminv1.LoadResponse{Merged: true},
			want: "" +
				"mesh-wide load, merged by this replica (the owner) from no replica's fresh summary\n" +
				"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n",
		},
		{
			name: "owner_elsewhere",
			rows: []*adminv1.LoadRow{row("checkout", "zone-a", "r1", "zone-a", "", 1, timestamppb.New(now))},
			resp: &adminv1.LoadResponse{OwnerElsewhere: true, Owner: "r2"},
			want: "" +
				"load reported to this replica only; the owner r2 merges every replica's\n" +
				"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n" +
				"checkout        zone-a       →  zone-a         1/1/0               2          42        1          0s ago\n",
		},
		{
			name: "owner_elsewhere_unknown",
			resp: &adminv1.LoadResponse{OwnerElsewhere: true},
			want: "" +
				"load reported to this replica only; the service's owner merges every replica's\n" +
				"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n",
		},
		{
			name: "one_region",
			rows: []*adminv1.LoadRow{
				row("", "", "r1", "zone-a", "rack-1", 1.5, timestamppb.New(now.Add(-4*time.Second))),
				row("checkout", "zone-a", "r1", "zone-b", "", 0, nil), // only stale reports
			},
			want: "" +
				"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n" +
				"(unknown)       -            →  zone-a/rack-1  1.5/1.5/0           2          42        1          4s ago\n" +
				"checkout        zone-a       →  zone-b         0/0/0               2          42        1          -\n",
		},
		{
			name: "regions_differ",
			rows: []*adminv1.LoadRow{
				row("checkout", "zone-a", "", "zone-a", "", 1, timestamppb.New(now)),
				row("checkout", "zone-a", "r1", "zone-a", "", 2, timestamppb.New(now)),
			},
			want: "" +
				"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n" +
				"checkout        zone-a       →  -/zone-a       1/1/0               2          42        1          0s ago\n" +
				"checkout        zone-a       →  r1/zone-a      2/2/0               2          42        1          0s ago\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			resp := &adminv1.LoadResponse{}
			if tc.resp != nil {
				resp = tc.resp
			}
			resp.Service, resp.Rows, resp.Time = "payments", tc.rows, timestamppb.New(now)
			if err := writeLoadTable(&b, resp); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("load table (-want +got):\n%s", diff)
			}
		})
	}
}
