package webguard

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/internal/httpjson"
)

// Config is what Handler checks requests against.
type Config struct {
	// Hosts are the names, besides IP literals, localhost (and names
	// under .localhost) and the machine's host name, that a request's
	// Host may carry: the DNS names clients and browsers reach the server
	// by (a load balancer's name). Compared without case and without a
	// trailing dot; each should pass CheckHost. Empty: no other name, but
	// on a TLS listener any name.
	Hosts []string
	// TLS says the listener speaks TLS. With no Hosts, its Host is then
	// not checked: a page that rebinds a name of its own to the server
	// fails the TLS handshake, as the certificate does not hold that
	// name.
	TLS bool
	// Hostname returns the machine's host name, allowed as a Host; nil
	// is os.Hostname. An error allows no such name.
	Hostname func() (string, error)
	// Registerer, or nil, gets spillway_http_refused_total.
	Registerer prometheus.Registerer
}

// Content types a write may carry: a browser sends neither cross-site
// without a CORS preflight, which spillway never answers.
var allowedTypes = map[string]bool{
	"application/json": true, // every JSON API
	"application/yaml": true, // the config and routes PUTs (spillwayctl)
}

// Handler returns next behind the checks of the package comment.
func Handler(cfg Config, next http.Handler) http.Handler {
	g := &guard{next: next, refused: newRefused(cfg.Registerer), toolWrites: newToolWrites(cfg.Registerer), anyHost: cfg.TLS && len(cfg.Hosts) == 0, hosts: map[string]bool{}}
	for _, h := range cfg.Hosts {
		if CheckHost(h) == nil {
			g.hosts[canonical(h)] = true
		}
	}
	hostname := cfg.Hostname
	if hostname == nil {
		hostname = os.Hostname
	}
	if h, err := hostname(); err == nil && CheckHost(h) == nil {
		g.hosts[canonical(h)] = true
	}
	return g
}

// guard is the handler Handler returns; read-only after Handler.
type guard struct {
	next    http.Handler
	refused *prometheus.CounterVec // check
	// toolWrites counts writes served from tools with a Content-Type a
	// page could send (curl -d's form type).
	toolWrites prometheus.Counter
	anyHost    bool
	hosts      map[string]bool // canonical names
	cop        http.CrossOriginProtection
}

// fromBrowser reports whether r carries what browsers add to the requests
// a page makes: Origin (on every cross-origin write, and every write of
// current browsers) or Sec-Fetch-Site (on every request of current
// browsers). Only such a request can be a cross-site write or a rebinding
// read; a tool (curl, an agent, Prometheus, spillwayctl) sends neither and
// is served as before this guard: its Host is whatever name it dialled, and
// a script's curl -d keeps its form Content-Type.
func fromBrowser(r *http.Request) bool {
	return r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != ""
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	browser := fromBrowser(r)
	if browser && !g.anyHost && !g.hostAllowed(r.Host) {
		g.refuse(w, checkHost, http.StatusMisdirectedRequest, "Host", fmt.Sprintf("Host %q is not a name of this server (a page rebinding its own name to it?): start spillway with --http-host NAME (http_hosts) for each name clients use; IP addresses and localhost are always served", r.Host))
		return
	}
	if err := g.cop.Check(r); err != nil {
		field, msg := "Origin", fmt.Sprintf("cross-origin request refused: a page of Origin %q may not change this server (%s); only spillway's own page may", r.Header.Get("Origin"), r.Host)
		if r.Header.Get("Origin") == "" {
			field, msg = "Sec-Fetch-Site", fmt.Sprintf("cross-origin request refused (Sec-Fetch-Site: %s); only spillway's own page may change this server", r.Header.Get("Sec-Fetch-Site"))
		}
		g.refuse(w, checkOrigin, http.StatusForbidden, field, msg)
		return
	}
	if msg, ok := contentTypeOK(r); !ok {
		if !browser {
			g.toolWrites.Inc() // served: scripts written for earlier releases send curl -d's type
		} else {
			w.Header().Set("Accept", "application/json, application/yaml")
			g.refuse(w, checkContentType, http.StatusUnsupportedMediaType, "Content-Type", msg)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

func (g *guard) refuse(w http.ResponseWriter, check string, code int, field, msg string) {
	g.refused.WithLabelValues(check).Inc()
	httpjson.WriteError(w, code, field, msg)
}

// hostAllowed reports whether the Host header hostport names this
// server: empty (a client without Host, not a browser), an IP literal,
// localhost or under .localhost, or one of g.hosts; the port is not
// looked at.
func (g *guard) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1] // [::1] without a port
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = canonical(host)
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || g.hosts[host]
}

// canonical is name lowercased without one trailing dot.
func canonical(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// contentTypeOK checks the Content-Type of a write (any method but GET,
// HEAD and OPTIONS): one of allowedTypes, or none with an empty body. A
// refusal returns the message.
func contentTypeOK(r *http.Request) (string, bool) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return "", true
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 {
			return "", true
		}
		return fmt.Sprintf("%s %s with a body needs Content-Type: application/json (application/yaml for service config and routes); curl: -H 'Content-Type: application/json'", r.Method, r.URL.Path), false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && allowedTypes[mt] {
		return "", true
	}
	return fmt.Sprintf("Content-Type %q: want application/json (application/yaml for service config and routes), which a web page cannot send without the server's consent; curl: -H 'Content-Type: application/json'", ct), false
}

// CheckHost reports whether name can be one of Config.Hosts: a DNS name
// (letters, digits, '-' and '_' in dot-separated labels, one trailing dot
// allowed), without scheme, port or path.
func CheckHost(name string) error {
	n := strings.TrimSuffix(name, ".")
	if n == "" || len(n) > 253 {
		return fmt.Errorf("%q: want a DNS name such as spillway.example.com", name)
	}
	for label := range strings.SplitSeq(n, ".") {
		if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return fmt.Errorf("%q: want a DNS name such as spillway.example.com, without scheme, port or path", name)
		}
	}
	return nil
}
