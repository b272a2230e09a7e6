package load

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/spillway/spillway/registry"
)

// Key identifies one flow of requests: clients of ClientService in
// ClientZone calling Service's endpoints in Locality.
type Key struct {
	ClientZone    string
	ClientService string
	Service       string
	Locality      registry.Locality
}

// Load is the measured traffic of one flow.
type Load struct {
	Key
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

// Table aggregates LRS reports. A report is fresh for three of its
// intervals; stale reports do not count in rates.
//
// Every key part is chosen by clients, so the table is bounded: a report
// for a cluster that is not a service in the store, or for a locality
// where the service has no endpoint, is not recorded; a client zone that
// holds no slot in the server's zone set (xds.Config.MaxZones; Node.Label)
// and has none of the service's endpoints is recorded as "other"
// ("invalid" when it is not a DNS label); a stream's samples go when the
// stream ends (Forget), stale samples on the next Prune (and every 1024
// records), and a flow's totals when it has not been reported for the idle
// period (NewTable; xds uses 5 min), or three of its intervals if longer.
// It is safe for concurrent use.
type Table struct {
	// Read-only after NewTable.
	idle time.Duration

	// mu guards the maps and records.
	mu      sync.Mutex
	latest  map[uint64]map[Key]sample // by LRS stream
	totals  map[Key]totals
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

// NewTable returns an empty table that forgets a flow's totals when it has
// not been reported for idle (or three of its intervals if longer).
func NewTable(idle time.Duration) *Table {
	return &Table{
		idle:   idle,
		latest: map[uint64]map[Key]sample{},
		totals: map[Key]totals{},
		locs:   map[string]*serviceLocalities{},
	}
}

// staleAfter is how many report intervals a report stays fresh.
const staleAfter = 3

// Reasons a report or part of one is not recorded (Record), the values of
// the reason label of spillway_lrs_dropped_total.
const (
	DropUnknownCluster  = "unknown_cluster"
	DropUnknownLocality = "unknown_locality"
	DropNoInterval      = "no_interval"
)

// localities returns the localities of svc's endpoints. Called with mu
// held.
func (t *Table) localities(svc *registry.Service) *serviceLocalities {
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

// Node is what a load reporter's node says about its client: its zone,
// the label that zone got in the server's bounded zone set (the zone
// itself while it holds a slot, else ZoneOther, ZoneInvalid, or any other
// value for no zone), and its cluster (the client service).
type Node struct {
	Zone, Label, Cluster string
}

// Labels a client zone is recorded under when it keeps no name of its own.
const (
	ZoneOther   = "other"   // a valid zone that holds no slot
	ZoneInvalid = "invalid" // not a DNS label (also a client service name too long)
)

// loadZone is the client zone a node's reports are recorded under for a
// service with endpoints in zones.
func (n Node) loadZone(zones map[string]struct{}) string {
	if n.Zone == "" || n.Zone == n.Label {
		return n.Zone
	}
	if _, ok := zones[n.Zone]; ok {
		return n.Zone
	}
	if n.Label == ZoneInvalid {
		return ZoneInvalid
	}
	return ZoneOther
}

// Record adds one cluster's report from an LRS stream (an id from
// NewStream) whose node is node, received at now, checked against snap.
// It calls kept, if non-nil, for every upstream locality recorded, and
// returns why the report, or how many of its localities, were not (a
// Drop reason, "" when all was recorded).
func (t *Table) Record(stream uint64, node Node, cs *v3endpointpb.ClusterStats, now time.Time, snap *registry.Snapshot, kept func(*v3endpointpb.UpstreamLocalityStats)) (reason string, droppedLocalities int) {
	name := cs.GetClusterServiceName()
	if name == "" {
		name = cs.GetClusterName()
	}
	svc, ok := snap.Service(registry.NormalizeService(name))
	if !ok {
		return DropUnknownCluster, 0
	}
	interval := cs.GetLoadReportInterval().AsDuration()
	if interval <= 0 {
		return DropNoInterval, 0
	}
	secs := interval.Seconds()
	clientService := node.Cluster
	if len(clientService) > registry.MaxNameLen {
		clientService = ZoneInvalid
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
		k := Key{ClientZone: clientZone, ClientService: clientService, Service: svc.Name, Locality: loc}
		m := t.latest[stream]
		if m == nil {
			m = map[Key]sample{}
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
		return DropUnknownLocality, droppedLocalities
	}
	return "", 0
}

// NewStream returns a new LRS stream id for Record and Forget.
func (t *Table) NewStream() uint64 { return t.streams.Add(1) }

// Forget drops the samples of an LRS stream that ended: its clients'
// traffic now arrives, if at all, on another stream.
func (t *Table) Forget(stream uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.latest, stream)
}

// Prune drops stale samples, the totals of flows not reported for the idle
// period and, when snap is non-nil, the localities of services gone from it.
func (t *Table) Prune(now time.Time, snap *registry.Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(now, snap)
}

func (t *Table) pruneLocked(now time.Time, snap *registry.Snapshot) {
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

// TableSize is how much a Table holds.
type TableSize struct {
	// Streams with samples, samples (one per stream and flow), flows with
	// totals, services with cached localities.
	Streams, Samples, Totals, Services int
}

// Size reports how much t holds.
func (t *Table) Size() TableSize {
	t.mu.Lock()
	defer t.mu.Unlock()
	sz := TableSize{Streams: len(t.latest), Totals: len(t.totals), Services: len(t.locs)}
	for _, m := range t.latest {
		sz.Samples += len(m)
	}
	return sz
}

// Loads returns the flows to service ("" for all), sorted.
func (t *Table) Loads(service string, now time.Time) []Load {
	t.mu.Lock()
	defer t.mu.Unlock()
	agg := map[Key]*Load{}
	get := func(k Key) *Load {
		l := agg[k]
		if l == nil {
			l = &Load{Key: k}
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
		return strings.Compare(loadSortKey(a.Key), loadSortKey(b.Key))
	})
	return out
}

func loadSortKey(k Key) string {
	return k.Service + "\x00" + k.ClientService + "\x00" + k.ClientZone + "\x00" + k.Locality.Region + "\x00" + k.Locality.Zone + "\x00" + k.Locality.SubZone
}
