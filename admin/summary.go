package admin

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry"
)

// Snapshotter gives the registry's current snapshot; *registry.Store
// implements it. It is called from many goroutines at once.
type Snapshotter interface {
	Snapshot() *registry.Snapshot
}

var _ Snapshotter = (*registry.Store)(nil)

// Paging of GET /v1/summary.
const (
	DefaultSummaryLimit = 100
	MaxSummaryLimit     = 1000
	maxSummaryQuery     = 253 // a service name is at most this long
)

// Summary is the answer of GET /v1/summary: one page of service
// summaries, sorted by name, and the fleet's client counts.
type Summary struct {
	// Total is the number of services matching the query (all pages).
	Total  int `json:"total"`
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
	// Version is the registry version the page was read at.
	Version  uint64           `json:"version"`
	Services []ServiceSummary `json:"services"`
	Clients  ClientCounts     `json:"clients"`
	Time     time.Time        `json:"time"`
}

// ServiceSummary is one service of the list.
type ServiceSummary struct {
	Name      string `json:"name"`
	Endpoints int    `json:"endpoints"`
	HealthCounts
	// Zones counts the endpoints per zone ("" for none), sorted by zone.
	Zones []ZoneCount `json:"zones"`
	// Sources are the feeds its endpoints come from, sorted (vm,
	// kubernetes, static).
	Sources []string `json:"sources"`
	// XDSClients is the number of distinct xDS nodes whose ADS stream
	// subscribes to the service by name; XDSStreams the streams.
	XDSClients int `json:"xds_clients"`
	XDSStreams int `json:"xds_streams"`
	// Weights is whether GET /v1/weights has zone-aware weights for it
	// (a 404 there otherwise).
	Weights bool `json:"weights"`
}

// HealthCounts counts endpoints by health.
type HealthCounts struct {
	Healthy   int `json:"healthy"`
	Draining  int `json:"draining"`
	Unhealthy int `json:"unhealthy"`
}

// ZoneCount counts one zone's endpoints by health.
type ZoneCount struct {
	Zone string `json:"zone"`
	HealthCounts
}

// ClientCounts says how many client services are on xDS and how many
// are not. The server sees an xDS client by its ADS stream; it cannot see
// a DNS client (a DNS query names no client), so dns_services counts the
// registry's services that have no ADS stream of their own (node.cluster):
// the ones that, if they call anything, look it up by DNS.
type ClientCounts struct {
	// XDSServices: distinct client services (node.cluster) with an ADS
	// stream; XDSNodes: distinct nodes; XDSStreams: streams.
	XDSServices int `json:"xds_services"`
	XDSNodes    int `json:"xds_nodes"`
	XDSStreams  int `json:"xds_streams"`
	// DNSServices: registry services that are not xDS client services.
	DNSServices int `json:"dns_services"`
}

// SummaryQuery is what GET /v1/summary asks.
type SummaryQuery struct {
	// Query keeps the services whose name contains it (case-insensitive);
	// "" keeps all.
	Query string
	// Name, when set, keeps only the service of that exact name.
	Name          string
	Offset, Limit int
}

// ParseSummaryQuery parses the query string of GET /v1/summary:
// query, name, offset (>= 0, default 0) and limit (1..MaxSummaryLimit,
// default DefaultSummaryLimit), each at most once. Errors name the
// parameter.
func ParseSummaryQuery(raw string) (SummaryQuery, error) {
	q := SummaryQuery{Limit: DefaultSummaryLimit}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, &registry.FieldError{Field: "query", Reason: fmt.Sprintf("malformed query string: %v", err)}
	}
	for k, vs := range vals {
		if k == "" {
			return q, &registry.FieldError{Field: "query", Reason: "a parameter without a name"}
		}
		if len(vs) > 1 {
			return q, &registry.FieldError{Field: k, Reason: fmt.Sprintf("given %d times, want once", len(vs))}
		}
		v := vs[0]
		switch k {
		case "query":
			if len(v) > maxSummaryQuery {
				return q, &registry.FieldError{Field: k, Reason: fmt.Sprintf("%d bytes, want at most %d", len(v), maxSummaryQuery)}
			}
			q.Query = strings.ToLower(strings.TrimSpace(v))
		case "name":
			if v == "" {
				continue
			}
			name := registry.NormalizeService(v)
			if err := registry.ValidateService("name", name); err != nil {
				return q, err
			}
			q.Name = name
		case "offset":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return q, &registry.FieldError{Field: k, Reason: fmt.Sprintf("%q, want an integer >= 0", v)}
			}
			q.Offset = n
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxSummaryLimit {
				return q, &registry.FieldError{Field: k, Reason: fmt.Sprintf("%q, want an integer in 1..%d", v, MaxSummaryLimit)}
			}
			q.Limit = n
		default:
			return q, &registry.FieldError{Field: k, Reason: "unknown query parameter (allowed: query, name, offset, limit)"}
		}
	}
	return q, nil
}

// summary answers q from the registry and the ADS streams. It reads the
// endpoints of the page's services only, so its cost beyond the page is
// one pass over the names and one over the streams.
func (a *API) summary(q SummaryQuery) *Summary {
	snap := a.registry.Snapshot()
	now := a.now()
	names := snap.Services()
	matched := names[:0]
	for _, n := range names {
		if q.Name != "" && n != q.Name {
			continue
		}
		if q.Query != "" && !strings.Contains(n, q.Query) {
			continue
		}
		matched = append(matched, n)
	}
	out := &Summary{Total: len(matched), Offset: q.Offset, Limit: q.Limit, Version: snap.Version(), Time: now}
	page := matched[min(q.Offset, len(matched)):min(q.Offset+q.Limit, len(matched))]
	out.Services = make([]ServiceSummary, len(page))
	index := make(map[string]int, len(page))
	for i, name := range page {
		index[name] = i
		out.Services[i] = serviceSummary(snap, name)
		if p := a.plans.Plan(name); p != nil {
			out.Services[i].Weights = p.Result != nil
		}
	}

	perPage := make([]map[string]struct{}, len(page))
	xdsServices := map[string]struct{}{}
	nodes := map[string]struct{}{}
	subs := a.subs.Subscriptions()
	out.Clients.XDSStreams = len(subs)
	for _, sub := range subs {
		nodes[sub.NodeID] = struct{}{}
		if sub.ClientService != "" {
			xdsServices[sub.ClientService] = struct{}{}
		}
		for _, s := range sub.Services {
			i, ok := index[s]
			if !ok {
				continue
			}
			out.Services[i].XDSStreams++
			if perPage[i] == nil {
				perPage[i] = map[string]struct{}{}
			}
			perPage[i][sub.NodeID] = struct{}{}
		}
	}
	for i := range perPage {
		out.Services[i].XDSClients = len(perPage[i])
	}
	out.Clients.XDSServices = len(xdsServices)
	out.Clients.XDSNodes = len(nodes)
	out.Clients.DNSServices = snap.Len()
	for s := range xdsServices {
		if _, ok := snap.Service(s); ok {
			out.Clients.DNSServices--
		}
	}
	return out
}

func serviceSummary(snap *registry.Snapshot, name string) ServiceSummary {
	s := ServiceSummary{Name: name, Zones: []ZoneCount{}, Sources: []string{}}
	svc, ok := snap.Service(name)
	if !ok {
		return s
	}
	s.Endpoints = len(svc.Endpoints)
	for _, e := range svc.Endpoints {
		i := slices.IndexFunc(s.Zones, func(z ZoneCount) bool { return z.Zone == e.Locality.Zone })
		if i < 0 {
			s.Zones = append(s.Zones, ZoneCount{Zone: e.Locality.Zone})
			i = len(s.Zones) - 1
		}
		s.Zones[i].add(e.Health)
		s.add(e.Health)
		if !slices.Contains(s.Sources, string(e.Source)) {
			s.Sources = append(s.Sources, string(e.Source))
		}
	}
	slices.SortFunc(s.Zones, func(x, y ZoneCount) int { return strings.Compare(x.Zone, y.Zone) })
	slices.Sort(s.Sources)
	return s
}

func (h *HealthCounts) add(health registry.Health) {
	switch health {
	case registry.Draining:
		h.Draining++
	case registry.Unhealthy:
		h.Unhealthy++
	default:
		h.Healthy++
	}
}

// serveSummary is GET /v1/summary.
func (a *API) serveSummary(w http.ResponseWriter, r *http.Request) {
	if a.registry == nil {
		httpjson.WriteError(w, http.StatusNotImplemented, "", "summary: the server has no registry configured")
		return
	}
	q, err := ParseSummaryQuery(r.URL.RawQuery)
	if err != nil {
		a.fail(w, err)
		return
	}
	if err := a.authorizeRegistry(r.Context()); err != nil {
		a.fail(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, a.summary(q))
}
