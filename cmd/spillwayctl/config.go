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
	fmt.Fprintln(tw, "SERVICE\tSTRATEGY\tSOURCE\tSTATE")
	for _, e := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Service, strategyOf(e.Config), sourceOf(e), stateOf(e))
	}
	return tw.Flush()
}

func writeConfigEntry(w io.Writer, e svcconfig.Entry) error {
	if !e.Configured {
		fmt.Fprintf(w, "service %s: no config, the defaults apply\n", e.Service)
	} else {
		fmt.Fprintf(w, "service %s: %s, from %s, version %d\n", e.Service, stateOf(e), sourceOf(e), e.Version)
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
