package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spillway/spillway/weights/svcconfig"
)

// defaultHTTP is spillway's default --http-addr, named in the error
// against a server that cannot say its own.
const defaultHTTP = "127.0.0.1:18080"

var configCommand = &command{
	name:    "config",
	args:    "list | get S | set S FILE | delete S | undelete S",
	nargs:   -1,
	summary: "per-service weight strategy config (docs/service-config.md); a deleted config is tombstoned and can be undeleted",
	flags: func(fs *flag.FlagSet) action {
		token := tokenFlag(fs)
		httpAddr := httpFlag(fs, "config")
		format := fs.String("o", "text", "output `format`: text or json; get also takes yaml (the config as written)")
		ifVersion := ifVersionFlag(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 {
				return usagef("want list, get S, set S FILE, delete S or undelete S")
			}
			sub, rest := args[0], args[1:]
			want := map[string]int{"list": 0, "get": 1, "set": 2, "delete": 1, "undelete": 1}
			n, ok := want[sub]
			switch {
			case !ok:
				return usagef("want list, get, set, delete or undelete, got %q", sub)
			case len(rest) != n:
				return usagef("%s wants %d arguments, got %d", sub, n, len(rest))
			case *format != "text" && *format != "json" && !(*format == "yaml" && sub == "get"):
				return usagef("-o %q: want text or json (or yaml for get)", *format)
			case *ifVersion != 0 && sub != "set" && sub != "delete":
				return usagef("--if-version is for set and delete")
			}
			method, path, tok := http.MethodGet, "/v1/config", ""
			var body []byte
			if sub != "list" {
				path += "/" + url.PathEscape(rest[0])
			}
			switch sub {
			case "set":
				b, err := os.ReadFile(rest[1])
				if err != nil {
					return fmt.Errorf("read the service config: %w", err)
				}
				method, body, tok = http.MethodPut, b, token(e)
			case "delete":
				method, tok = http.MethodDelete, token(e)
			case "undelete":
				method, path, tok = http.MethodPost, path+"/undelete", token(e)
			}
			out, err := callConfig(ctx, e, *httpAddr, method, path, tok, body, *ifVersion)
			if err != nil {
				return err
			}
			if *format == "json" {
				_, err := e.stdout.Write(out)
				return err
			}
			if sub == "list" {
				var list []svcconfig.Entry
				if err := json.Unmarshal(out, &list); err != nil {
					return fmt.Errorf("decode the answer: %w", err)
				}
				return writeConfigList(e.stdout, list)
			}
			var ent svcconfig.Entry
			if err := json.Unmarshal(out, &ent); err != nil {
				return fmt.Errorf("decode the answer: %w", err)
			}
			for _, w := range ent.Warnings { // set: accepted, but part of it does not apply now
				fmt.Fprintf(e.stderr, "spillwayctl: warning: %s\n", w)
			}
			if *format == "yaml" {
				_, err := io.WriteString(e.stdout, ent.YAML)
				return err
			}
			return writeConfigEntry(e.stdout, ent)
		}
	},
}

// ifVersionFlag defines --if-version: a set or delete applies only while
// the setting is still at the version a get showed (-1: only if there
// is none), sent as If-Match (If-None-Match: *).
func ifVersionFlag(fs *flag.FlagSet) *int64 {
	return fs.Int64("if-version", 0, "set, delete: apply only while the setting is at this `version` (what get shows; -1: only if there is none); else the server refuses it (HTTP 412) and nothing changes")
}

// callConfig sends one request to the HTTP API at addr (--http; "" asks
// --server where it is) and returns the body of a 2xx answer; any other
// answer is an error carrying the server's message. ifVersion non-zero
// makes the request conditional (see ifVersionFlag).
func callConfig(ctx context.Context, e *env, addr, method, path, token string, body []byte, ifVersion int64) ([]byte, error) {
	// Every body the config and route commands send is YAML; the server
	// refuses a write whose type a web page could send
	// (security/webguard).
	return callHTTP(ctx, e, addr, method, path, token, "application/yaml", body, ifVersion)
}

// callHTTP is callConfig with the body's Content-Type.
func callHTTP(ctx context.Context, e *env, addr, method, path, token, contentType string, body []byte, ifVersion int64) ([]byte, error) {
	api, err := e.httpAPI(ctx, addr, token)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, api.base+path, bytes.NewReader(body))
	if err != nil {
		if addr != "" {
			return nil, usagef("--http %q: %v", addr, err)
		}
		return nil, fmt.Errorf("%s %s: %w (%s)", method, path, err, api.hint)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", contentType)
	}
	switch {
	case ifVersion == -1:
		req.Header.Set("If-None-Match", "*")
	case ifVersion > 0:
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatInt(ifVersion, 10)))
	case ifVersion < 0:
		return nil, usagef("--if-version %d: want a version a get showed, or -1", ifVersion)
	}
	client, err := api.creds.HTTPClient()
	if err != nil {
		return nil, usagef("%v (--tls-ca, --tls-cert, --tls-key, --token-file)", err)
	}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (%s)", method, path, err, api.hint)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(out, &eb) != nil || eb.Error == "" {
			eb.Error = string(bytes.TrimSpace(out))
		}
		return nil, fmt.Errorf("%s (HTTP %d)", eb.Error, resp.StatusCode)
	}
	return out, nil
}

func writeConfigList(w io.Writer, list []svcconfig.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tSTRATEGY\tSOURCE\tSTATE\tPOLICIES")
	for _, e := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Service, strategyOf(e.Config), sourceOf(e), stateOf(e), policySummary(e.Config.Resilience))
	}
	return tw.Flush()
}

func writeConfigEntry(w io.Writer, e svcconfig.Entry) error {
	if !e.Configured {
		fmt.Fprintf(w, "service %s: no config, the defaults apply\n", e.Service)
	} else {
		fmt.Fprintf(w, "service %s: %s, from %s, version %d\n", e.Service, stateOf(e), sourceOf(e), e.Version)
	}
	if lines := policyLines(e.Config.Resilience); lines == nil {
		fmt.Fprintln(w, "resilience: none (clients keep their own defaults)")
	} else {
		fmt.Fprintln(w, "resilience:")
		for _, l := range lines {
			fmt.Fprintf(w, "  %s%s: %s\n", strings.Repeat("  ", l.depth), l.name, l.text)
		}
	}
	b, err := json.MarshalIndent(e.Config, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func strategyOf(c svcconfig.Config) string {
	if c.Blend != nil {
		return fmt.Sprintf("%s→%s %g%%", c.Blend.From, c.Blend.To, c.Blend.Percent)
	}
	return c.Strategy
}

func sourceOf(e svcconfig.Entry) string {
	if e.File != "" {
		return e.Source + ":" + e.File
	}
	return e.Source
}

func stateOf(e svcconfig.Entry) string {
	if !e.Deleted || e.DeletedAt == nil || e.Until == nil {
		return "active"
	}
	return fmt.Sprintf("deleted %s, applies until %s", e.DeletedAt.UTC().Format(time.RFC3339), e.Until.UTC().Format(time.RFC3339))
}

// policySummary is r in a few words, for the POLICIES column of config
// list: "outlier(sr,fp) max_requests=100 timeout=5s
// retry(2×unavailable) fault(delay 20%,abort 10% if x-chaos)
// ring_hash(x-user)"; "-" when r sends no policy.
func policySummary(r svcconfig.Resilience) string {
	var out []string
	if od := r.OutlierDetection; od != nil {
		var rules []string
		if od.SuccessRate != nil {
			rules = append(rules, "sr")
		}
		if od.FailurePercentage != nil {
			rules = append(rules, "fp")
		}
		out = append(out, "outlier("+strings.Join(rules, ",")+")")
	}
	if r.MaxRequests > 0 {
		out = append(out, fmt.Sprintf("max_requests=%d", r.MaxRequests))
	}
	if r.Timeout > 0 {
		out = append(out, "timeout="+time.Duration(r.Timeout).String())
	}
	if rt := r.Retry; rt != nil {
		out = append(out, fmt.Sprintf("retry(%d×%s)", rt.NumRetries, strings.Join(rt.On, ",")))
	}
	if f := r.Fault; f != nil {
		var parts []string
		if f.Delay != nil {
			parts = append(parts, "delay "+showPct(f.Delay.Percent))
		}
		if f.Abort != nil {
			parts = append(parts, "abort "+showPct(f.Abort.Percent))
		}
		s := "fault(" + strings.Join(parts, ",")
		if f.Header != "" {
			s += " if " + f.Header
		}
		out = append(out, s+")")
	}
	if lb := r.LB; lb != nil {
		switch {
		case lb.RingHash != nil:
			out = append(out, "ring_hash("+lb.RingHash.Header+")")
		case lb.LeastRequest != nil:
			out = append(out, fmt.Sprintf("least_request(%d)", lb.LeastRequest.ChoiceCount))
		case lb.ClientWRR != nil:
			out = append(out, "client_wrr")
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " ")
}

// policyLine is one line of config get's "resilience:" section: the
// policy's field name and what it makes clients do, every value with
// its unit. depth 1 is a part of the policy above it (outlier
// detection's two ejection rules).
type policyLine struct {
	depth      int
	name, text string
}

// policyLines describes r, one line per policy, in the order and words
// of the web page's Policies panel (policyLines in
// admin/ui/assets/app.js: change both); nil when r sends no policy.
func policyLines(r svcconfig.Resilience) []policyLine {
	var out []policyLine
	add := func(depth int, name, format string, args ...any) {
		out = append(out, policyLine{depth, name, fmt.Sprintf(format, args...)})
	}
	if od := r.OutlierDetection; od != nil {
		add(0, "outlier_detection", "every %s, ejects for %s × times ejected (at most %s), at most %d%% of endpoints at once",
			showDur(od.Interval), showDur(od.BaseEjectionTime), showDur(od.MaxEjectionTime), od.MaxEjectionPercent)
		if sr := od.SuccessRate; sr != nil {
			add(1, "success_rate", "success rate more than %s stdev below the mean; enforced %d%%; judged when %d endpoints have %d RPCs or more in the interval",
				showNum(sr.StdevFactor), sr.EnforcementPercent, sr.MinimumHosts, sr.RequestVolume)
		}
		if fp := od.FailurePercentage; fp != nil {
			add(1, "failure_percentage", "more than %d%% of RPCs failed; enforced %d%%; judged when %d endpoints have %d RPCs or more in the interval",
				fp.Threshold, fp.EnforcementPercent, fp.MinimumHosts, fp.RequestVolume)
		}
	}
	if r.MaxRequests > 0 {
		add(0, "max_requests", "%s in flight per client process, then UNAVAILABLE", showCount(r.MaxRequests, "RPC", "RPCs"))
	}
	if r.Timeout > 0 {
		add(0, "timeout", "%s at most per RPC", showDur(r.Timeout))
	}
	if rt := r.Retry; rt != nil {
		add(0, "retry", "up to %s on %s; backoff %s, doubling, at most %s",
			showCount(rt.NumRetries, "retry", "retries"), strings.Join(rt.On, ", "), showDur(rt.BaseInterval), showDur(rt.MaxInterval))
	}
	if f := r.Fault; f != nil {
		var parts []string
		if d := f.Delay; d != nil {
			parts = append(parts, fmt.Sprintf("delay %s on %s of RPCs", showDur(d.Fixed), showPct(d.Percent)))
		}
		if a := f.Abort; a != nil {
			parts = append(parts, fmt.Sprintf("abort %s of RPCs with %s", showPct(a.Percent), showCode(a.GRPCStatus)))
		}
		if f.Header != "" {
			parts = append(parts, "only RPCs with header "+f.Header)
		} else {
			parts = append(parts, "every RPC")
		}
		if f.MaxActiveFaults > 0 {
			parts = append(parts, fmt.Sprintf("at most %s at once", showCount(f.MaxActiveFaults, "fault", "faults")))
		}
		add(0, "fault", "%s", strings.Join(parts, "; "))
	}
	if lb := r.LB; lb != nil {
		switch {
		case lb.RingHash != nil:
			rh := lb.RingHash
			add(0, "lb", "ring_hash on header %s, a ring of %d to %d entries", rh.Header, rh.MinRingSize, rh.MaxRingSize)
		case lb.LeastRequest != nil:
			add(0, "lb", "least_request, the least loaded of %d random endpoints", lb.LeastRequest.ChoiceCount)
		case lb.ClientWRR != nil:
			w := lb.ClientWRR
			from := "RPC trailers"
			if w.OOBReportingPeriod > 0 {
				from = "out-of-band reports every " + showDur(w.OOBReportingPeriod)
			}
			add(0, "lb", "client_wrr by the endpoints' load reports (%s); blackout %s, weights expire after %s, updated every %s, error penalty %s",
				from, showDur(w.BlackoutPeriod), showDur(w.WeightExpirationPeriod), showDur(w.WeightUpdatePeriod), showNum(w.ErrorUtilizationPenalty))
		}
	}
	return out
}

// showDur, showNum and showPct print as the page does: Go's duration
// string (the JSON's), the shortest decimal digits (JavaScript's String).
func showDur(d svcconfig.Duration) string { return time.Duration(d).String() }
func showNum(v float64) string            { return strconv.FormatFloat(v, 'f', -1, 64) }
func showPct(v float64) string            { return showNum(v) + "%" }

// showCount is n with its noun, singular or plural.
func showCount(n uint32, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// abortCodes are the gRPC status codes' names, by number, as a config
// writes them (fault.abort.grpc_status).
var abortCodes = []string{
	"ok", "cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
	"permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
	"unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
}

// showCode is code by name and number: "unavailable (14)".
func showCode(code uint32) string {
	if int(code) < len(abortCodes) {
		return fmt.Sprintf("%s (%d)", abortCodes[code], code)
	}
	return fmt.Sprintf("status %d", code)
}
