package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spillway/spillway/replica/clusterversion"
)

var clusterVersionCommand = &command{
	name:    "cluster-version",
	args:    "[show | hold | release]",
	nargs:   -1,
	summary: "the cluster version replicas run at, the hold that keeps a rollback possible, and what each live replica supports",
	flags: func(fs *flag.FlagSet) action {
		token := tokenFlag(fs)
		httpAddr := httpFlag(fs, "cluster version")
		format, check := outputFlag(fs)
		ifVersion := fs.Int64("if-version", 0, "hold, release: apply only while the record is at this `revision` (what show prints; -1: only while none is stored); else the server refuses it (HTTP 412) and nothing changes")
		return func(ctx context.Context, e *env, args []string) error {
			if err := check(); err != nil {
				return err
			}
			sub := "show"
			switch {
			case len(args) > 1:
				return usagef("want show, hold or release, got %d arguments", len(args))
			case len(args) == 1:
				sub = args[0]
			}
			method, tok := http.MethodGet, ""
			var body []byte
			switch sub {
			case "show":
				if *ifVersion != 0 {
					return usagef("--if-version is for hold and release")
				}
			case "hold", "release":
				method, tok = http.MethodPost, token(e)
				body, _ = json.Marshal(map[string]bool{"hold": sub == "hold"})
			default:
				return usagef("want show, hold or release, got %q", sub)
			}
			out, err := callHTTP(ctx, e, *httpAddr, method, clusterversion.Path, tok, "application/json", body, *ifVersion)
			if err != nil {
				if strings.HasSuffix(err.Error(), "(HTTP 404)") {
					return fmt.Errorf("%w: a server of a release before cluster versions (a770d6c) has no %s: ask a replica of this release", err, clusterversion.Path)
				}
				return err
			}
			if *format == "json" {
				_, err := e.stdout.Write(out)
				return err
			}
			var v clusterversion.View
			if err := json.Unmarshal(out, &v); err != nil {
				return fmt.Errorf("decode the answer: %w", err)
			}
			if sub == "hold" && v.Version > clusterversion.Baseline {
				fmt.Fprintf(e.stderr, "spillwayctl: note: version %d is finalised already: the hold keeps it from going higher, it cannot bring it back\n", v.Version)
			}
			return writeClusterVersion(e.stdout, v)
		}
	},
}

// writeClusterVersion prints v: the version and the hold, then each live
// member and the highest version it supports, then what finalisation
// waits for.
func writeClusterVersion(w io.Writer, v clusterversion.View) error {
	if !v.Shared {
		_, err := fmt.Fprintf(w, "cluster version %d: a single replica (no shared store) runs its binary's version; there is nothing to hold\n", v.Version)
		return err
	}
	line := fmt.Sprintf("cluster version %d", v.Version)
	if v.FinalisedBy != "" {
		line += fmt.Sprintf(", finalised by %s at %s", v.FinalisedBy, v.FinalisedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "%s (revision %d)\n", line, v.Revision)
	hold := "hold: off"
	if v.Hold {
		hold = "hold: on"
	}
	if v.HoldBy != "" {
		hold += fmt.Sprintf(" (changed by %s at %s)", v.HoldBy, v.HoldAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(w, hold)
	fmt.Fprintf(w, "this server's binary supports up to %d\n", v.Supported)
	if len(v.Members) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MEMBER\tSUPPORTS\tIDENTITY")
		for _, m := range v.Members {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", m.ID, m.MaxVersion, m.Identity)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case v.Next != 0:
		fmt.Fprintf(w, "finalising: the replicas raise it to %d within seconds\n", v.Next)
	case v.Waiting != "":
		fmt.Fprintf(w, "not finalised: %s\n", v.Waiting)
	}
	return nil
}
