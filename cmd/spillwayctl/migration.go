package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	migrationv1 "github.com/spillway/spillway/migration/migrationv1"
)

// tokenEnv holds the admin token when --token is not given.
const tokenEnv = "SPILLWAY_ADMIN_TOKEN"

// tokenFlag defines --token and returns the token to send: --token, else
// "" when the global --token-file is set (it is sent instead), else
// $SPILLWAY_ADMIN_TOKEN, else "".
func tokenFlag(fs *flag.FlagSet) func(e *env) string {
	tok := fs.String("token", "", "admin `token` for changes (default: the global --token-file, else $"+tokenEnv+"; the environment keeps it out of ps)")
	return func(e *env) string {
		if *tok != "" {
			return strings.TrimSpace(*tok)
		}
		if e.creds.TokenFile != "" {
			return ""
		}
		return strings.TrimSpace(os.Getenv(tokenEnv))
	}
}

// callMigration runs fn with a Migration client and a context bounded by
// --timeout that carries token, if any, as "authorization: Bearer".
func callMigration(ctx context.Context, e *env, token string, fn func(ctx context.Context, c migrationv1.MigrationClient) error) error {
	conn, err := e.dialToken(token)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return fn(ctx, migrationv1.NewMigrationClient(conn))
}

var panicCommand = &command{
	name:    "panic",
	args:    "on|off|status",
	nargs:   1,
	summary: "the panic button: on sends every client back to DNS (TXT _xds: xds=off), off lets them use xDS again",
	flags: func(fs *flag.FlagSet) action {
		token := tokenFlag(fs)
		format, check := outputFlag(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if err := check(); err != nil {
				return err
			}
			var set *bool
			switch args[0] {
			case "on", "off":
				on := args[0] == "on"
				set = &on
			case "status":
			default:
				return usagef("want on, off or status, got %q", args[0])
			}
			return callMigration(ctx, e, token(e), func(ctx context.Context, c migrationv1.MigrationClient) error {
				var st *migrationv1.PanicState
				var err error
				if set == nil {
					st, err = c.GetPanic(ctx, &migrationv1.GetPanicRequest{})
				} else {
					st, err = c.SetPanic(ctx, &migrationv1.SetPanicRequest{Panic: *set})
				}
				if err != nil {
					return err
				}
				if *format == "json" {
					return printJSON(e.stdout, st)
				}
				return writePanic(e.stdout, st, time.Now())
			})
		}
	},
}

// writePanic prints the flag in one line:
//
//	panic on: TXT _xds says xds=off, every client uses DNS (since 2026-03-01T12:00:00Z, 5m0s ago)
func writePanic(w io.Writer, st *migrationv1.PanicState, now time.Time) error {
	what := "eligible clients may use xDS"
	if st.GetPanic() {
		what = "every client uses DNS"
	}
	since := "never changed"
	if st.GetChanged() != nil {
		since = "since " + st.GetChanged().AsTime().UTC().Format(time.RFC3339) + ", " + age(st.GetChanged(), now)
	}
	_, err := fmt.Fprintf(w, "panic %s: TXT _xds says xds=%s, %s (%s)\n", onOff(st.GetPanic()), st.GetXds(), what, since)
	return err
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

var rolloutCommand = &command{
	name:    "rollout",
	args:    "show | set FILE | validate FILE",
	nargs:   -1,
	summary: "show, set or dry-run the rollout config that decides which client services may use xDS",
	flags: func(fs *flag.FlagSet) action {
		token := tokenFlag(fs)
		format := fs.String("o", "text", "output `format`: text or json; show also takes yaml (the config as set)")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 {
				return usagef("want show, set FILE or validate FILE")
			}
			sub, rest := args[0], args[1:]
			switch {
			case sub != "show" && sub != "set" && sub != "validate":
				return usagef("want show, set FILE or validate FILE, got %q", sub)
			case sub == "show" && len(rest) != 0:
				return usagef("show takes no argument, got %q", rest[0])
			case sub != "show" && len(rest) != 1:
				return usagef("%s wants one FILE, got %d arguments", sub, len(rest))
			}
			switch *format {
			case "text", "json":
			case "yaml":
				if sub != "show" {
					return usagef("-o yaml: only for show; want text or json")
				}
			default:
				return usagef("-o %q: want text or json (or yaml for show)", *format)
			}
			var yaml []byte
			if sub != "show" {
				b, err := os.ReadFile(rest[0])
				if err != nil {
					return fmt.Errorf("read the rollout config: %w", err)
				}
				yaml = b
			}
			return callMigration(ctx, e, token(e), func(ctx context.Context, c migrationv1.MigrationClient) error {
				switch sub {
				case "show", "set":
					var r *migrationv1.Rollout
					var err error
					if sub == "show" {
						r, err = c.GetRollout(ctx, &migrationv1.GetRolloutRequest{})
					} else {
						r, err = c.SetRollout(ctx, &migrationv1.SetRolloutRequest{Yaml: string(yaml)})
					}
					if err != nil {
						return err
					}
					switch *format {
					case "json":
						return printJSON(e.stdout, r)
					case "yaml":
						_, err := io.WriteString(e.stdout, r.GetYaml())
						return err
					}
					return writeRollout(e.stdout, r)
				default:
					resp, err := c.ValidateRollout(ctx, &migrationv1.ValidateRolloutRequest{Yaml: string(yaml)})
					if err != nil {
						return err
					}
					if *format == "json" {
						return printJSON(e.stdout, resp)
					}
					if len(resp.GetDecisions()) == 0 {
						fmt.Fprintln(e.stderr, "spillwayctl rollout: no known client services (no xDS client connected, no service in the registry)")
					}
					return writeDryRun(e.stdout, resp)
				}
			})
		}
	},
}

// writeRollout prints the version and the rules:
//
//	rollout config version 3, changed 2026-03-01T12:00:00Z
//	#  NAME   MATCH                     PERCENT
//	0  tier3  region=us-east1,tier=3    10
//	1  -      *                         0
func writeRollout(w io.Writer, r *migrationv1.Rollout) error {
	if r.GetVersion() == 0 {
		_, err := fmt.Fprintln(w, "no rollout config set (version 0): no client service is eligible for xDS")
		return err
	}
	fmt.Fprintf(w, "rollout config version %d, changed %s\n", r.GetVersion(), stamp(r.GetChanged()))
	if len(r.GetRules()) == 0 {
		_, err := fmt.Fprintln(w, "no rules: no client service is eligible for xDS")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tNAME\tMATCH\tPERCENT")
	for i, rule := range r.GetRules() {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i, orDash(rule.GetName()), formatMatch(rule.GetMatch()), strconv.FormatFloat(rule.GetPercent(), 'f', -1, 64))
	}
	return tw.Flush()
}

// formatMatch writes a rule's match as sorted key=value pairs; "*" for the
// empty match, which matches every service.
func formatMatch(m map[string]string) string {
	if len(m) == 0 {
		return "*"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func stamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// writeDryRun prints one row per known client service and a summary:
//
//	SERVICE   BUCKET  RULE   ELIGIBLE
//	checkout  1234    tier3  yes
//	payments  8765    -      no
//
//	2 rules; 1 of 2 known client services would be eligible for xDS; 1 matches no rule.
//
// RULE is the deciding rule's name (#index when unnamed), "-" when none
// matched. A service is eligible when its BUCKET is below PERCENT*100.
func writeDryRun(w io.Writer, resp *migrationv1.ValidateRolloutResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tBUCKET\tRULE\tELIGIBLE")
	for _, d := range resp.GetDecisions() {
		rule := "-"
		switch {
		case d.GetRule() >= 0 && d.GetRuleName() != "":
			rule = d.GetRuleName()
		case d.GetRule() >= 0:
			rule = "#" + strconv.Itoa(int(d.GetRule()))
		}
		eligible := "no"
		if d.GetEligible() {
			eligible = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", d.GetService(), d.GetBucket(), rule, eligible)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verb := "match"
	if resp.GetUnmatched() == 1 {
		verb = "matches"
	}
	_, err := fmt.Fprintf(w, "\n%s; %d of %s would be eligible for xDS; %d %s no rule.\n",
		plural(len(resp.GetRules()), "rule", "rules"), resp.GetEligible(),
		plural(len(resp.GetDecisions()), "known client service", "known client services"), resp.GetUnmatched(), verb)
	return err
}

// plural writes n and the noun that goes with it: "1 rule", "2 rules".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
