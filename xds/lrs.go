package xds

import (
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3lrsgrpc "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	v3lrspb "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/registry"
)

// LoadKey identifies one flow of requests: clients of ClientService in
// ClientZone calling Service's endpoints in Locality.
type LoadKey struct {
	ClientZone    string
	ClientService string
	Service       string
	Locality      registry.Locality
}

// Load is the measured traffic of one flow.
type Load struct {
	LoadKey
	// Rates per second over the reporters' last intervals, summed over
	// the reporters whose last report is fresh.
	Issued, Succeeded, Errored float64
	// InProgress is the sum of the reporters' in-flight requests.
	InProgress uint64
	// Totals since the server started, over every report.
	TotalIssued, TotalSucceeded, TotalErrored uint64
	// Reporters is how many clients' fresh reports are summed.
	Reporters int
	// Updated is the time of the newest report.
	Updated time.Time
}

type sample struct {
	issued, succeeded, errored float64
	inProgress                 uint64
	at                         time.Time
	interval                   time.Duration
}

type reporterKey struct {
	stream uint64
	key    LoadKey
}

type totals struct{ issued, succeeded, errored uint64 }

// LoadTable aggregates LRS reports. A report is fresh for three of its
// intervals; stale reports do not count in rates.
type LoadTable struct {
	// mu guards the maps.
	mu      sync.Mutex
	latest  map[reporterKey]sample
	totals  map[LoadKey]totals
	records int // since the last prune
	streams atomic.Uint64
}

func newLoadTable() *LoadTable {
	return &LoadTable{latest: map[reporterKey]sample{}, totals: map[LoadKey]totals{}}
}

// staleAfter is how many report intervals a report stays fresh.
const staleAfter = 3

func (t *LoadTable) record(stream uint64, node nodeInfo, cs *v3endpointpb.ClusterStats, now time.Time) {
	svc := cs.GetClusterServiceName()
	if svc == "" {
		svc = cs.GetClusterName()
	}
	svc = registry.NormalizeService(svc)
	interval := cs.GetLoadReportInterval().AsDuration()
	if interval <= 0 {
		return
	}
	secs := interval.Seconds()
	t.mu.Lock()
	defer t.mu.Unlock()
	// Reporters come and go (every reconnect is a new stream): drop their
	// stale samples now and then, so the table does not grow without bound
	// when nobody reads it.
	if t.records++; t.records >= 1024 {
		t.records = 0
		for rk, s := range t.latest {
			if now.Sub(s.at) > staleAfter*s.interval {
				delete(t.latest, rk)
			}
		}
	}
	for _, ul := range cs.GetUpstreamLocalityStats() {
		k := LoadKey{ClientZone: node.zone, ClientService: node.cluster, Service: svc, Locality: registry.Locality{
			Region: ul.GetLocality().GetRegion(), Zone: ul.GetLocality().GetZone(), SubZone: ul.GetLocality().GetSubZone(),
		}}
		t.latest[reporterKey{stream, k}] = sample{
			issued:     float64(ul.GetTotalIssuedRequests()) / secs,
			succeeded:  float64(ul.GetTotalSuccessfulRequests()) / secs,
			errored:    float64(ul.GetTotalErrorRequests()) / secs,
			inProgress: ul.GetTotalRequestsInProgress(),
			at:         now,
			interval:   interval,
		}
		tot := t.totals[k]
		tot.issued += ul.GetTotalIssuedRequests()
		tot.succeeded += ul.GetTotalSuccessfulRequests()
		tot.errored += ul.GetTotalErrorRequests()
		t.totals[k] = tot
	}
}

// Loads returns the flows to service ("" for all), sorted.
func (t *LoadTable) Loads(service string, now time.Time) []Load {
	t.mu.Lock()
	defer t.mu.Unlock()
	agg := map[LoadKey]*Load{}
	get := func(k LoadKey) *Load {
		l := agg[k]
		if l == nil {
			l = &Load{LoadKey: k}
			agg[k] = l
		}
		return l
	}
	for rk, s := range t.latest {
		if service != "" && rk.key.Service != service {
			continue
		}
		if now.Sub(s.at) > staleAfter*s.interval {
			delete(t.latest, rk)
			continue
		}
		l := get(rk.key)
		l.Issued += s.issued
		l.Succeeded += s.succeeded
		l.Errored += s.errored
		l.InProgress += s.inProgress
		l.Reporters++
		if s.at.After(l.Updated) {
			l.Updated = s.at
		}
	}
	for k, tot := range t.totals {
		if service != "" && k.Service != service {
			continue
		}
		l := get(k)
		l.TotalIssued, l.TotalSucceeded, l.TotalErrored = tot.issued, tot.succeeded, tot.errored
	}
	out := make([]Load, 0, len(agg))
	for _, l := range agg {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b Load) int {
		return strings.Compare(loadSortKey(a.LoadKey), loadSortKey(b.LoadKey))
	})
	return out
}

func loadSortKey(k LoadKey) string {
	return k.Service + "\x00" + k.ClientService + "\x00" + k.ClientZone + "\x00" + k.Locality.Region + "\x00" + k.Locality.Zone + "\x00" + k.Locality.SubZone
}

// StreamLoadStats implements LRS: it asks the client to report every
// cluster every LRSInterval and records the reports.
func (s *Server) StreamLoadStats(stream v3lrsgrpc.LoadReportingService_StreamLoadStatsServer) error {
	id := s.loads.streams.Add(1)
	var node nodeInfo
	sentInterval := false
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if req.GetNode() != nil {
			node = nodeOf(req.GetNode())
		}
		now := time.Now()
		for _, cs := range req.GetClusterStats() {
			s.loads.record(id, node, cs, now)
			s.metrics.lrsReports.Inc()
			for _, ul := range cs.GetUpstreamLocalityStats() {
				to := zoneLabel(ul.GetLocality().GetZone())
				from := zoneLabel(node.zone)
				s.metrics.lrsRequests.WithLabelValues(from, to, "succeeded").Add(float64(ul.GetTotalSuccessfulRequests()))
				s.metrics.lrsRequests.WithLabelValues(from, to, "errored").Add(float64(ul.GetTotalErrorRequests()))
			}
		}
		if !sentInterval {
			sentInterval = true
			if err := stream.Send(&v3lrspb.LoadStatsResponse{
				SendAllClusters:       true,
				LoadReportingInterval: durationpb.New(s.cfg.LRSInterval),
			}); err != nil {
				return err
			}
		}
	}
}
