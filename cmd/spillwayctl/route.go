package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spillway/spillway/xds/routing"
)

// headerFlags collects repeated --header "name: value".
type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

var routeCommand = &command{
	name:    "route",
	args:    "list | get S | set S FILE | delete S | validate S FILE",
	nargs:   -1,
	summary: "per-service route rules by header / method path to a target or weighted targets (docs/routing.md); validate is a dry run",
	flags: func(fs *flag.FlagSet) action {
		token := tokenFlag(fs)
		httpAddr := httpFlag(fs, "routes")
		format := fs.String("o", "text", "output `format`: text or json; get also takes yaml (the rules as written)")
		file := fs.String("f", "", "the rules `file` (YAML), for set and validate, instead of the FILE argument")
		path := fs.String("path", "", "validate: the gRPC method `path` of a sample request (/package.Service/Method)")
		var headers headerFlags
		fs.Var(&headers, "header", "validate: a `name: value` header of the sample request (repeatable)")
		ifVersion := ifVersionFlag(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 {
				return usagef("want list, get S, set S FILE, delete S or validate S FILE")
			}
			sub, rest := args[0], args[1:]
			want := map[string]int{"list": 0, "get": 1, "set": 2, "delete": 1, "validate": 2}
			n, ok := want[sub]
			if ok && *file != "" && (sub == "set" || sub == "validate") {
				n = 1
			}
			switch {
			case !ok:
				return usagef("want list, get, set, delete or validate, got %q", sub)
			case len(rest) != n:
				return usagef("%s wants %d arguments, got %d", sub, n, len(rest))
			case *format != "text" && *format != "json" && !(*format == "yaml" && sub == "get"):
				return usagef("-o %q: want text or json (or yaml for get)", *format)
			case (*path != "" || len(headers) > 0) && sub != "validate":
				return usagef("--path and --header are for validate")
			case *ifVersion != 0 && sub != "set" && sub != "delete":
				return usagef("--if-version is for set and delete")
			}
			method, p, tok := http.MethodGet, "/v1/routes", ""
			var body []byte
			if sub != "list" {
				p += "/" + url.PathEscape(rest[0])
			}
			if sub == "set" || sub == "validate" {
				name := *file
				if name == "" {
					name = rest[1]
				}
				b, err := os.ReadFile(name)
				if err != nil {
					return fmt.Errorf("read the route rules: %w", err)
				}
				body = b
			}
			switch sub {
			case "set":
				method, tok = http.MethodPut, token(e)
			case "delete":
				method, tok = http.MethodDelete, token(e)
			case "validate":
				method, p = http.MethodPost, p+"/validate"
				q := url.Values{}
				if *path != "" {
					q.Set("path", *path)
				}
				for _, h := range headers {
					q.Add("header", h)
				}
				if len(q) > 0 {
					p += "?" + q.Encode()
				}
			}
			out, err := callConfig(ctx, e, *httpAddr, method, p, tok, body, *ifVersion)
			if err != nil {
				return err
			}
			if *format == "json" {
				_, err := e.stdout.Write(out)
				return err
			}
			switch sub {
			case "list":
				var list []routing.Entry
				if err := json.Unmarshal(out, &list); err != nil {
					return fmt.Errorf("decode the answer: %w", err)
				}
				return writeRouteList(e.stdout, list)
			case "validate":
				var rep routing.Report
				if err := json.Unmarshal(out, &rep); err != nil {
					return fmt.Errorf("decode the answer: %w", err)
				}
				return writeRouteReport(e.stdout, rep)
			}
			var ent routing.Entry
			if err := json.Unmarshal(out, &ent); err != nil {
				return fmt.Errorf("decode the answer: %w", err)
			}
			if *format == "yaml" {
				_, err := io.WriteString(e.stdout, ent.YAML)
				return err
			}
			return writeRouteEntry(e.stdout, ent)
		}
	},
}

func writeRouteList(w io.Writer, list []routing.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tRULES\tDEFAULT\tBROKEN\tVERSION")
	for _, e := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\n", e.Service, len(e.Rules), e.Default, len(e.Broken), e.Version)
	}
	return tw.Flush()
}

func targetsOf(r routing.Rule) string {
	if r.To != "" {
		return r.To
	}
	parts := make([]string, 0, len(r.Split))
	for _, t := range r.Split {
		parts = append(parts, fmt.Sprintf("%s:%d", t.To, t.Weight))
	}
	return strings.Join(parts, " ")
}

func matchOf(m routing.Match) string {
	var parts []string
	if m.PathPrefix != "" {
		parts = append(parts, "path^="+m.PathPrefix)
	}
	for _, h := range m.Headers {
		switch {
		case h.Present:
			parts = append(parts, h.Name+" present")
		case h.Regex != "":
			parts = append(parts, h.Name+"~"+h.Regex)
		case h.Prefix != "":
			parts = append(parts, h.Name+"^="+h.Prefix)
		default:
			parts = append(parts, h.Name+"="+h.Exact)
		}
	}
	if len(parts) == 0 {
		return "*"
	}
	return strings.Join(parts, " ")
}

func writeRouteEntry(w io.Writer, e routing.Entry) error {
	if !e.Configured {
		_, err := fmt.Fprintf(w, "service %s: no route rules, every RPC goes to %s\n", e.Service, e.Default)
		return err
	}
	fmt.Fprintf(w, "service %s: %d rules, version %d\n", e.Service, len(e.Rules), e.Version)
	broken := map[int][]string{}
	for _, b := range e.Broken {
		broken[b.Index] = b.Missing
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tRULE\tMATCH\tTO\tSTATE")
	for i, r := range e.Rules {
		state := "ok"
		if m, ok := broken[i]; ok {
			state = "broken: " + strings.Join(m, ", ") + " not registered; its RPCs take the default route"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i, r.Label(i), matchOf(r.Match), targetsOf(r), state)
	}
	state := "ok"
	if m, ok := broken[-1]; ok {
		state = "broken: " + strings.Join(m, ", ") + " not registered; " + e.Service + " takes them"
	}
	fmt.Fprintf(tw, "-\tdefault\t*\t%s\t%s\n", e.Default, state)
	return tw.Flush()
}

func writeRouteReport(w io.Writer, rep routing.Report) error {
	fmt.Fprintf(w, "service %s: the rules are valid (nothing was changed)\n", rep.Service)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tTARGET\tWEIGHT\tHEALTHY")
	for _, r := range rep.Rules {
		for _, t := range r.Targets {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", r.Rule, t.To, t.Weight, t.Healthy)
		}
	}
	fmt.Fprintf(tw, "default\t%s\t-\t-\n", rep.Default)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Clients) == 0 {
		fmt.Fprintf(w, "clients: none subscribed to %s now\n", rep.Service)
	}
	for _, c := range rep.Clients {
		name := c.Service
		if name == "" {
			name = "(no node.cluster)"
		}
		fmt.Fprintf(w, "client %s: %d streams subscribed to %s get these routes\n", name, c.Streams, rep.Service)
	}
	for _, s := range rep.Samples {
		fmt.Fprintf(w, "sample %s %v: rule %s → %s\n", s.Path, s.Headers, s.Rule, strings.Join(s.Targets, ", "))
	}
	return nil
}
