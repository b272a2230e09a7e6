package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spillway/spillway/security/audit"
)

// viewerZone is the zone audit times are shown in: the viewer's.
var viewerZone = func() *time.Location { return time.Local }

var auditCommand = &command{
	name:    "audit",
	summary: "recent admin changes and denied calls, from every replica, newest first (needs read_audit)",
	flags: func(fs *flag.FlagSet) action {
		token := tokenFlag(fs)
		httpAddr := httpFlag(fs, "audit")
		since := fs.String("since", "", "show entries from this long ago (`D`, e.g. 1h) or since an RFC 3339 time; default all kept")
		limit := fs.Int("limit", audit.DefaultLimit, fmt.Sprintf("at most `N` entries (1 to %d)", audit.MaxLimit))
		format, check := outputFlag(fs)
		return func(ctx context.Context, e *env, _ []string) error {
			if err := check(); err != nil {
				return err
			}
			if *limit < 1 || *limit > audit.MaxLimit {
				return usagef("--limit %d: want 1 to %d", *limit, audit.MaxLimit)
			}
			q := url.Values{"limit": {strconv.Itoa(*limit)}}
			if *since != "" {
				t, err := parseSince(*since, time.Now())
				if err != nil {
					return err
				}
				q.Set("since", t.UTC().Format(time.RFC3339Nano))
			}
			out, err := callConfig(ctx, e, *httpAddr, http.MethodGet, audit.Path+"?"+q.Encode(), token(e), nil, 0)
			if err != nil {
				return err
			}
			if *format == "json" {
				_, err := e.stdout.Write(out)
				return err
			}
			var entries []audit.Entry
			if err := json.Unmarshal(out, &entries); err != nil {
				return fmt.Errorf("decode the answer: %w", err)
			}
			return writeAudit(e.stdout, entries, viewerZone())
		}
	},
}

// parseSince reads --since: a positive duration back from now, or an
// RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usagef("--since %s: want a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--since %q: want a duration (1h) or an RFC 3339 time (2006-01-02T15:04:05Z)", s)
	}
	return t, nil
}

// writeAudit prints one line per entry; times in loc.
func writeAudit(w io.Writer, entries []audit.Entry, loc *time.Location) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no audit entries")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tIDENTITY\tACTION\tRESOURCE\tOUTCOME\tCHANGE")
	for _, e := range entries {
		change := oneLine(e.Old, 40) + " → " + oneLine(e.New, 40)
		if e.Old == "" && e.New == "" {
			change = "-"
		}
		if e.Outcome != audit.OutcomeAllowed && e.Reason != "" {
			change += " (" + oneLine(e.Reason, 80) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.In(loc).Format("2006-01-02 15:04:05 MST"),
			e.Identity, e.Action, dash(e.Resource), e.Outcome, change)
	}
	return tw.Flush()
}

// oneLine squeezes s to one line of at most n runes; "" is shown as "∅".
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "∅"
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
