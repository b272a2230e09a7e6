package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	adminv1 "github.com/spillway/spillway/admin/adminv1"
)

// unknownClient shows a client service that its node did not name
// (node.cluster empty).
const unknownClient = "(unknown)"

// allClients shows the client service of a merged row: every client
// service, summed.
const allClients = "(all)"

// callAdmin runs fn with an Admin client and a context bounded by --timeout.
func callAdmin(ctx context.Context, e *env, fn func(ctx context.Context, c adminv1.AdminClient) error) error {
	conn, err := e.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return fn(ctx, adminv1.NewAdminClient(conn))
}

var loadCommand = &command{
	name:    "load",
	args:    "SERVICE",
	nargs:   1,
	summary: "show the load clients report (LRS) for a service, per client and locality; the mesh-wide merged load on its owner",
	flags: func(fs *flag.FlagSet) action {
		format, check := outputFlag(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if err := check(); err != nil {
				return err
			}
			return callAdmin(ctx, e, func(ctx context.Context, c adminv1.AdminClient) error {
				resp, err := c.Load(ctx, &adminv1.LoadRequest{Service: args[0]})
				if err != nil {
					return err
				}
				if *format == "json" {
					return printJSON(e.stdout, resp)
				}
				if len(resp.GetRows()) == 0 {
					fmt.Fprintf(e.stderr, "spillwayctl load: no load reports for %s\n", resp.GetService())
				}
				return writeLoadTable(e.stdout, resp)
			})
		}
	},
}

// loadNote says whose load a LoadResponse shows when replicas share load;
// "" when they do not (one replica).
//
//	mesh-wide load, merged by this replica (the owner) from r0 (0.4s old), r1 (0.9s old)
//	load reported to this replica only; the owner r2 merges every replica's
func loadNote(resp *adminv1.LoadResponse) string {
	switch {
	case resp.GetMerged():
		from := "no replica's fresh summary"
		if cs := resp.GetMergedFrom(); len(cs) > 0 {
			from = contributors(cs)
		}
		return "mesh-wide load, merged by this replica (the owner) from " + from
	case resp.GetOwnerElsewhere():
		owner := "the service's owner"
		if resp.GetOwner() != "" {
			owner = "the owner " + resp.GetOwner()
		}
		return "load reported to this replica only; " + owner + " merges every replica's"
	}
	return ""
}

// writeLoadTable prints one row per flow. LOCALITY-ZONE is the upstream
// zone (zone/sub-zone if it has one), prefixed with its region (region/zone,
// "-" for none) when the rows do not all share one region, so that two
// localities never look alike. AGE is the age of the newest fresh report by
// the server's clock; "-" when every report is stale. A merged (mesh-wide)
// table, which sums every client service and has no totals, shows
// CLIENT-SERVICE "(all)" and TOTAL-OK "-". The table is preceded by
// loadNote's line when there is one.
func writeLoadTable(w io.Writer, resp *adminv1.LoadResponse) error {
	if note := loadNote(resp); note != "" {
		fmt.Fprintln(w, note)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT-SERVICE\tCLIENT-ZONE\t→\tLOCALITY-ZONE\tRPS(ISSUED/OK/ERR)\tIN-FLIGHT\tTOTAL-OK\tREPORTERS\tAGE")
	now := resp.GetTime().AsTime()
	regions := map[string]bool{}
	for _, r := range resp.GetRows() {
		regions[r.GetLocality().GetRegion()] = true
	}
	for _, r := range resp.GetRows() {
		loc := orDash(r.GetLocality().GetZone())
		if sz := r.GetLocality().GetSubZone(); sz != "" {
			loc += "/" + sz
		}
		if len(regions) > 1 {
			loc = orDash(r.GetLocality().GetRegion()) + "/" + loc
		}
		client, totalOK := clientName(r.GetClientService()), strconv.FormatUint(r.GetTotalSucceeded(), 10)
		if resp.GetMerged() {
			client, totalOK = allClients, "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t→\t%s\t%s/%s/%s\t%d\t%s\t%d\t%s\n",
			client, orDash(r.GetClientZone()), loc,
			rate(r.GetIssuedRps()), rate(r.GetSucceededRps()), rate(r.GetErroredRps()),
			r.GetInProgress(), totalOK, r.GetReporters(), age(r.GetUpdated(), now))
	}
	return tw.Flush()
}

func clientName(s string) string {
	if s == "" {
		return unknownClient
	}
	return s
}

// rate shows requests per second to two decimals at most: 12.5, 0.33, 1200.
func rate(r float64) string {
	return strconv.FormatFloat(math.Round(r*100)/100, 'f', -1, 64)
}

var graphCommand = &command{
	name:    "graph",
	summary: "show who calls whom: client service -> service, with rps and streams",
	flags: func(fs *flag.FlagSet) action {
		format := fs.String("o", "text", "output `format`: text, json or dot (Graphviz)")
		return func(ctx context.Context, e *env, _ []string) error {
			switch *format {
			case "text", "json", "dot":
			default:
				return usagef("-o %q: want text, json or dot", *format)
			}
			return callAdmin(ctx, e, func(ctx context.Context, c adminv1.AdminClient) error {
				resp, err := c.Graph(ctx, &adminv1.GraphRequest{})
				if err != nil {
					return err
				}
				switch *format {
				case "json":
					return printJSON(e.stdout, resp)
				case "dot":
					return writeGraphDOT(e.stdout, resp.GetEdges())
				}
				if len(resp.GetEdges()) == 0 {
					fmt.Fprintln(e.stderr, "spillwayctl graph: no connected xDS streams and no fresh load reports")
				}
				return writeGraphText(e.stdout, resp.GetEdges())
			})
		}
	},
}

// writeGraphText prints one line per edge:
//
//	checkout -> payments  12.5 rps  3 streams (zone-a,zone-b)
func writeGraphText(w io.Writer, edges []*adminv1.Edge) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, ed := range edges {
		fmt.Fprintf(tw, "%s -> %s\t%s rps\t%s\n", clientName(ed.GetClientService()), ed.GetService(), rate(ed.GetRps()), streams(ed))
	}
	return tw.Flush()
}

// streams shows an edge's stream count and client zones: "3 streams
// (zone-a,zone-b)", "1 stream (zone-a)", "0 streams".
func streams(ed *adminv1.Edge) string {
	s := fmt.Sprintf("%d streams", ed.GetStreams())
	if ed.GetStreams() == 1 {
		s = "1 stream"
	}
	if len(ed.GetZones()) == 0 {
		return s
	}
	zones := make([]string, len(ed.GetZones()))
	for i, z := range ed.GetZones() {
		zones[i] = z
		if z == "" {
			zones[i] = "unknown"
		}
	}
	return s + " (" + strings.Join(zones, ",") + ")"
}

// writeGraphDOT prints the edges as a Graphviz digraph: every name quoted,
// each edge labeled with its rps and streams, dashed when no traffic is
// reported on it.
func writeGraphDOT(w io.Writer, edges []*adminv1.Edge) error {
	var b strings.Builder
	b.WriteString("digraph spillway {\n")
	b.WriteString("  rankdir=LR;\n")
	b.WriteString("  node [shape=box];\n")
	for _, ed := range edges {
		fmt.Fprintf(&b, "  %s -> %s [label=%s", dotQuote(clientName(ed.GetClientService())), dotQuote(ed.GetService()),
			dotQuote(rate(ed.GetRps())+" rps, "+streams(ed)))
		if ed.GetRps() == 0 {
			b.WriteString(", style=dashed")
		}
		b.WriteString("];\n")
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// dotQuote quotes s as a DOT string: backslashes and double quotes escaped,
// line breaks as \n, so any client-chosen name makes a valid graph.
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r\n", `\n`, "\n", `\n`, "\r", `\n`)
	return `"` + r.Replace(s) + `"`
}
