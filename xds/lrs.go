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

func (s sample) stale(now time.Time) bool { return now.Sub(s.at) > staleAfter*s.interval }

type totals struct {
	issued, succeeded, errored uint64
	at                         time.Time // last report
	interval                   time.Duration
}

// LoadTable aggregates LRS reports. A report is fresh for three of its
// intervals; stale reports do not count in rates.
//
// Every key part is chosen by clients, so the table is bounded: a report
// for a cluster that is not a service in the store, or for a locality
// where the service has no endpoint, is not recorded; a client zone that
// holds no slot in the server's zone set (Config.MaxZones) and has none of
// the service's endpoints is recorded as "other" ("invalid" when it is not
// a DNS label); a stream's samples go when the stream ends, stale samples
// on the next prune, and a flow's totals when it has not been reported for
// the idle period (5 min, or three of its intervals if longer).
type LoadTable struct {
	// Read-only after newLoadTable.
	idle time.Duration

	// mu guards the maps and records.
	mu      sync.Mutex
	latest  map[uint64]map[LoadKey]sample // by LRS stream
	totals  map[LoadKey]totals
	locs    map[string]*serviceLocalities // by service
	records int                           // since the last prune
	streams atomic.Uint64
}

// serviceLocalities are the localities and zones of one service version's
// endpoints: the only upstream localities a report may name.
type serviceLocalities struct {
	svc   *registry.Service
	locs  map[registry.Locality]struct{}
	zones map[string]struct{}
}

func newLoadTable(idle time.Duration) *LoadTable {
	return &LoadTable{
		idle:   idle,
		latest: map[uint64]map[LoadKey]sample{},
		totals: map[LoadKey]totals{},
		locs:   map[string]*serviceLocalities{},
	}
}

// staleAfter is how many report intervals a report stays fresh.
const staleAfter = 3

// Reasons a report or part of one is not recorded, the values of the
// reason label of spillway_lrs_dropped_total.
const (
	dropUnknownCluster  = "unknown_cluster"
	dropUnknownLocality = "unknown_locality"
	dropNoInterval      = "no_interval"
)

// localities returns the localities of svc's endpoints. Called with mu
// held.
func (t *LoadTable) localities(svc *registry.Service) *serviceLocalities {
	sl := t.locs[svc.Name]
	if sl != nil && sl.svc == svc {
		return sl
	}
	sl = &serviceLocalities{svc: svc, locs: map[registry.Locality]struct{}{}, zones: map[string]struct{}{}}
	for _, e := range svc.Endpoints {
		sl.locs[e.Locality] = struct{}{}
		sl.zones[e.Locality.Zone] = struct{}{}
	}
	t.locs[svc.Name] = sl
	return sl
}

// loadZone is the client zone a node's reports are recorded under for a
// service with endpoints in zones.
func (n nodeInfo) loadZone(zones map[string]struct{}) string {
	if n.zone == "" || n.zone == n.label {
		return n.zone
	}
	if _, ok := zones[n.zone]; ok {
		return n.zone
	}
	if n.label == labelInvalid {
		return labelInvalid
	}
	return labelOther
}

// record adds one cluster's report from an LRS stream. It calls kept for
// every upstream locality recorded, and returns why the report, or how
// many of its localities, were not.
func (t *LoadTable) record(stream uint64, node nodeInfo, cs *v3endpointpb.ClusterStats, now time.Time, snap *registry.Snapshot, kept func(*v3endpointpb.UpstreamLocalityStats)) (reason string, droppedLocalities int) {
	name := cs.GetClusterServiceName()
	if name == "" {
		name = cs.GetClusterName()
	}
	svc, ok := snap.Service(registry.NormalizeService(name))
	if !ok {
		return dropUnknownCluster, 0
	}
	interval := cs.GetLoadReportInterval().AsDuration()
	if interval <= 0 {
		return dropNoInterval, 0
	}
	secs := interval.Seconds()
	clientService := node.cluster
	if len(clientService) > registry.MaxNameLen {
		clientService = labelInvalid
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Reporters come and go (every reconnect is a new stream): drop their
	// stale samples now and then, so the table does not grow without bound
	// when nobody reads it.
	if t.records++; t.records >= 1024 {
		t.records = 0
		t.pruneLocked(now, nil)
	}
	sl := t.localities(svc)
	clientZone := node.loadZone(sl.zones)
	// A report states the stream's whole load to the service: a locality
	// it leaves out (grpc-go skips those with nothing to report) carries
	// nothing now, so the stream's earlier sample of it goes.
	if m := t.latest[stream]; m != nil {
		for k := range m {
			if k.Service == svc.Name && k.ClientZone == clientZone && k.ClientService == clientService {
				delete(m, k)
			}
		}
	}
	for _, ul := range cs.GetUpstreamLocalityStats() {
		loc := registry.Locality{Region: ul.GetLocality().GetRegion(), Zone: ul.GetLocality().GetZone(), SubZone: ul.GetLocality().GetSubZone()}
		if _, ok := sl.locs[loc]; !ok {
			droppedLocalities++
			continue
		}
		k := LoadKey{ClientZone: clientZone, ClientService: clientService, Service: svc.Name, Locality: loc}
		m := t.latest[stream]
		if m == nil {
			m = map[LoadKey]sample{}
			t.latest[stream] = m
		}
		m[k] = sample{
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
		tot.at, tot.interval = now, interval
		t.totals[k] = tot
		if kept != nil {
			kept(ul)
		}
	}
	if droppedLocalities > 0 {
		return dropUnknownLocality, droppedLocalities
	}
	return "", 0
}

// forget drops the samples of an LRS stream that ended: its clients'
// traffic now arrives, if at all, on another stream.
func (t *LoadTable) forget(stream uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.latest, stream)
}

// prune drops stale samples, the totals of flows not reported for the idle
// period and, when snap is non-nil, the localities of services gone from it.
func (t *LoadTable) prune(now time.Time, snap *registry.Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(now, snap)
}

func (t *LoadTable) pruneLocked(now time.Time, snap *registry.Snapshot) {
	for id, m := range t.latest {
		for k, s := range m {
			if s.stale(now) {
				delete(m, k)
			}
		}
		if len(m) == 0 {
			delete(t.latest, id)
		}
	}
	if snap == nil {
		return
	}
	for k, tot := range t.totals {
		if now.Sub(tot.at) > max(t.idle, staleAfter*tot.interval) {
			delete(t.totals, k)
		}
	}
	for name := range t.locs {
		if _, ok := snap.Service(name); !ok {
			delete(t.locs, name)
		}
	}
}

// LoadTableSize is how much a LoadTable holds.
type LoadTableSize struct {
	// Streams with samples, samples (one per stream and flow), flows with
	// totals, services with cached localities.
	Streams, Samples, Totals, Services int
}

// Size reports how much t holds.
func (t *LoadTable) Size() LoadTableSize {
	t.mu.Lock()
	defer t.mu.Unlock()
	sz := LoadTableSize{Streams: len(t.latest), Totals: len(t.totals), Services: len(t.locs)}
	for _, m := range t.latest {
		sz.Samples += len(m)
	}
	return sz
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
	for id, m := range t.latest {
		for k, s := range m {
			if s.stale(now) {
				delete(m, k)
				continue
			}
			if service != "" && k.Service != service {
				continue
			}
			l := get(k)
			l.Issued += s.issued
			l.Succeeded += s.succeeded
			l.Errored += s.errored
			l.InProgress += s.inProgress
			l.Reporters++
			if s.at.After(l.Updated) {
				l.Updated = s.at
			}
		}
		if len(m) == 0 {
			delete(t.latest, id)
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
// cluster every LRSInterval and records the reports. The stream holds its
// client zone's slot in the zone set until it ends; its samples go with it.
func (s *Server) StreamLoadStats(stream v3lrsgrpc.LoadReportingService_StreamLoadStatsServer) error {
	id := s.loads.streams.Add(1)
	var node nodeInfo
	known := false
	defer func() {
		s.loads.forget(id)
		if known {
			s.zones.release(node.label, time.Now())
		}
	}()
	sentInterval := false
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		now := time.Now()
		if req.GetNode() != nil {
			n := nodeOf(req.GetNode())
			if !known || n.zone != node.zone {
				if known {
					s.zones.release(node.label, now)
				}
				n.label = s.zones.acquire(n.zone, now)
				known = true
			} else {
				n.label = node.label
			}
			node = n
		}
		snap := s.store.Snapshot()
		from := node.label
		if !known {
			from = labelNone
		}
		kept := func(ul *v3endpointpb.UpstreamLocalityStats) {
			to := zoneLabel(ul.GetLocality().GetZone())
			s.metrics.lrsRequests.WithLabelValues(from, to, "succeeded").Add(float64(ul.GetTotalSuccessfulRequests()))
			s.metrics.lrsRequests.WithLabelValues(from, to, "errored").Add(float64(ul.GetTotalErrorRequests()))
		}
		for _, cs := range req.GetClusterStats() {
			s.metrics.lrsReports.Inc()
			reason, n := s.loads.record(id, node, cs, now, snap, kept)
			switch {
			case n > 0:
				s.metrics.lrsDropped.WithLabelValues(reason).Add(float64(n))
			case reason != "":
				s.metrics.lrsDropped.WithLabelValues(reason).Inc()
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
