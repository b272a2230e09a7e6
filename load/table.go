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
// stream ends (Forget), stale samples on the next read or Prune, and also
// whenever the samples held reach twice those left by the previous such
// sweep (at least 1,024 more): sweeping then costs O(1) per sample
// recorded, and the samples held stay within twice the fresh ones plus
// 1,024; a flow's totals go when it has not been reported for the idle
// period (NewTable; xds uses 5 min), or three of its intervals if longer.
// It is safe for concurrent use.
type Table struct {
	// Read-only after NewTable.
	idle time.Duration

	// mu guards the fields below.
	mu sync.Mutex
	// svcs holds each service's samples and totals.
	svcs map[string]*serviceLoads
	// streams are the services each LRS stream has samples of.
	streams map[uint64]map[string]struct{}
	locs    map[string]*serviceLocalities // by service
	// samples counts the samples held; a sweep of the stale ones runs
	// when it passes sweepAt.
	samples, sweepAt int
	// Scratch of AppendLoads, kept between calls.
	names []string
	index map[flowKey]int

	nextStream atomic.Uint64
}

// serviceLoads are one service's samples, by LRS stream and flow, and its
// flows' totals.
type serviceLoads struct {
	latest map[uint64]map[flowKey]sample
	totals map[flowKey]totals
}

// flowKey is a Key within one service.
type flowKey struct {
	clientZone, clientService string
	locality                  registry.Locality
}

// minSweep is the fewest samples recorded between two sweeps.
const minSweep = 1024

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
		idle:    idle,
		svcs:    map[string]*serviceLoads{},
		streams: map[uint64]map[string]struct{}{},
		locs:    map[string]*serviceLocalities{},
		sweepAt: minSweep,
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
	// Reporters come and go (every reconnect is a new stream): sweep the
	// stale samples when they may have doubled, so the table does not
	// grow without bound when nobody reads it.
	if t.samples >= t.sweepAt {
		t.pruneLocked(now, nil)
	}
	sl := t.localities(svc)
	clientZone := node.loadZone(sl.zones)
	sv := t.svcs[svc.Name]
	if sv == nil {
		sv = &serviceLoads{latest: map[uint64]map[flowKey]sample{}, totals: map[flowKey]totals{}}
		t.svcs[svc.Name] = sv
	}
	// A report states the stream's whole load to the service: a locality
	// it leaves out (grpc-go skips those with nothing to report) carries
	// nothing now, so the stream's earlier sample of it goes.
	m := sv.latest[stream]
	for k := range m {
		if k.clientZone == clientZone && k.clientService == clientService {
			delete(m, k)
			t.samples--
		}
	}
	for _, ul := range cs.GetUpstreamLocalityStats() {
		loc := registry.Locality{Region: ul.GetLocality().GetRegion(), Zone: ul.GetLocality().GetZone(), SubZone: ul.GetLocality().GetSubZone()}
		if _, ok := sl.locs[loc]; !ok {
			droppedLocalities++
			continue
		}
		k := flowKey{clientZone: clientZone, clientService: clientService, locality: loc}
		if m == nil {
			m = map[flowKey]sample{}
			sv.latest[stream] = m
			ss := t.streams[stream]
			if ss == nil {
				ss = map[string]struct{}{}
				t.streams[stream] = ss
			}
			ss[svc.Name] = struct{}{}
		}
		if _, ok := m[k]; !ok {
			t.samples++
		}
		m[k] = sample{
			issued:     float64(ul.GetTotalIssuedRequests()) / secs,
			succeeded:  float64(ul.GetTotalSuccessfulRequests()) / secs,
			errored:    float64(ul.GetTotalErrorRequests()) / secs,
			inProgress: ul.GetTotalRequestsInProgress(),
			at:         now,
			interval:   interval,
		}
		tot := sv.totals[k]
		tot.issued += ul.GetTotalIssuedRequests()
		tot.succeeded += ul.GetTotalSuccessfulRequests()
		tot.errored += ul.GetTotalErrorRequests()
		tot.at, tot.interval = now, interval
		sv.totals[k] = tot
		if kept != nil {
			kept(ul)
		}
	}
	if m != nil && len(m) == 0 {
		t.dropStreamLocked(sv, svc.Name, stream)
	}
	if len(sv.latest) == 0 && len(sv.totals) == 0 {
		delete(t.svcs, svc.Name)
	}
	if droppedLocalities > 0 {
		return DropUnknownLocality, droppedLocalities
	}
	return "", 0
}

// dropStreamLocked forgets stream's (now empty) samples of service.
func (t *Table) dropStreamLocked(sv *serviceLoads, service string, stream uint64) {
	delete(sv.latest, stream)
	if ss := t.streams[stream]; ss != nil {
		delete(ss, service)
		if len(ss) == 0 {
			delete(t.streams, stream)
		}
	}
}

// NewStream returns a new LRS stream id for Record and Forget.
func (t *Table) NewStream() uint64 { return t.nextStream.Add(1) }

// Forget drops the samples of an LRS stream that ended: its clients'
// traffic now arrives, if at all, on another stream.
func (t *Table) Forget(stream uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name := range t.streams[stream] {
		sv := t.svcs[name]
		if sv == nil {
			continue
		}
		t.samples -= len(sv.latest[stream])
		delete(sv.latest, stream)
		if len(sv.latest) == 0 && len(sv.totals) == 0 {
			delete(t.svcs, name)
		}
	}
	delete(t.streams, stream)
}

// Prune drops stale samples, the totals of flows not reported for the idle
// period and, when snap is non-nil, the localities of services gone from it.
func (t *Table) Prune(now time.Time, snap *registry.Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(now, snap)
}

func (t *Table) pruneLocked(now time.Time, snap *registry.Snapshot) {
	for name, sv := range t.svcs {
		t.dropStaleLocked(sv, name, now)
		if snap != nil {
			for k, tot := range sv.totals {
				if now.Sub(tot.at) > max(t.idle, staleAfter*tot.interval) {
					delete(sv.totals, k)
				}
			}
		}
		if len(sv.latest) == 0 && len(sv.totals) == 0 {
			delete(t.svcs, name)
		}
	}
	// The next sweep once the samples may have doubled: what it looks at
	// is paid for by as many samples recorded since this one.
	t.sweepAt = max(2*t.samples, t.samples+minSweep)
	if snap == nil {
		return
	}
	for name := range t.locs {
		if _, ok := snap.Service(name); !ok {
			delete(t.locs, name)
		}
	}
}

// dropStaleLocked drops service's stale samples.
func (t *Table) dropStaleLocked(sv *serviceLoads, service string, now time.Time) {
	for id, m := range sv.latest {
		for k, s := range m {
			if s.stale(now) {
				delete(m, k)
				t.samples--
			}
		}
		if len(m) == 0 {
			t.dropStreamLocked(sv, service, id)
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
	sz := TableSize{Streams: len(t.streams), Samples: t.samples, Services: len(t.locs)}
	for _, sv := range t.svcs {
		sz.Totals += len(sv.totals)
	}
	return sz
}

// Loads returns the flows to service ("" for all), sorted by service,
// client service, client zone and locality.
func (t *Table) Loads(service string, now time.Time) []Load {
	if service == "" {
		// Sized for every flow with totals (every flow recorded and not
		// idle) in one allocation.
		t.mu.Lock()
		n := 0
		for _, sv := range t.svcs {
			n += len(sv.totals)
		}
		t.mu.Unlock()
		return t.AppendLoads(make([]Load, 0, n), now)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sv := t.svcs[service]
	if sv == nil {
		return []Load{}
	}
	return t.appendService(make([]Load, 0, len(sv.totals)), sv, service, now)
}

// AppendLoads appends Loads("", now) to dst and returns it: the weights
// planner reads every flow each cycle into the same buffer
// (weights.LoadAppender), so a read allocates nothing per service once
// the buffer and the table's scratch have grown to the table.
func (t *Table) AppendLoads(dst []Load, now time.Time) []Load {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := t.names[:0]
	for name := range t.svcs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		dst = t.appendService(dst, t.svcs[name], name, now)
	}
	clear(names) // the scratch keeps no service names alive
	t.names = names[:0]
	return dst
}

// appendService appends service's flows, summed over its fresh samples,
// with their totals, sorted; it drops the stale samples it meets. Called
// with t.mu held.
func (t *Table) appendService(dst []Load, sv *serviceLoads, service string, now time.Time) []Load {
	start := len(dst)
	index := t.index // rows by flow, once the service has many
	clear(index)
	row := func(k flowKey) *Load {
		if len(dst)-start <= linearRows {
			for j := start; j < len(dst); j++ {
				if dst[j].ClientZone == k.clientZone && dst[j].ClientService == k.clientService && dst[j].Locality == k.locality {
					return &dst[j]
				}
			}
		} else {
			if len(index) == 0 {
				if index == nil {
					index = map[flowKey]int{}
					t.index = index
				}
				for j := start; j < len(dst); j++ {
					index[flowKey{dst[j].ClientZone, dst[j].ClientService, dst[j].Locality}] = j
				}
			}
			if j, ok := index[k]; ok {
				return &dst[j]
			}
		}
		if len(index) > 0 {
			index[k] = len(dst)
		}
		dst = append(dst, Load{Key: Key{ClientZone: k.clientZone, ClientService: k.clientService, Service: service, Locality: k.locality}})
		return &dst[len(dst)-1]
	}
	t.dropStaleLocked(sv, service, now)
	for _, m := range sv.latest {
		for k, s := range m {
			l := row(k)
			l.Issued += s.issued
			l.Succeeded += s.succeeded
			l.Errored += s.errored
			l.InProgress += s.inProgress
			l.Reporters++
			if s.at.After(l.Updated) {
				l.Updated = s.at
			}
		}
	}
	for k, tot := range sv.totals {
		l := row(k)
		l.TotalIssued, l.TotalSucceeded, l.TotalErrored = tot.issued, tot.succeeded, tot.errored
	}
	clear(index)
	slices.SortFunc(dst[start:], func(a, b Load) int { return compareFlows(&a.Key, &b.Key) })
	return dst
}

// linearRows is how many rows of a service appendService searches one by
// one before it indexes them.
const linearRows = 32

// compareFlows orders keys by service, client service, client zone,
// region, zone and subzone.
func compareFlows(a, b *Key) int {
	if c := strings.Compare(a.Service, b.Service); c != 0 {
		return c
	}
	if c := strings.Compare(a.ClientService, b.ClientService); c != 0 {
		return c
	}
	if c := strings.Compare(a.ClientZone, b.ClientZone); c != 0 {
		return c
	}
	if c := strings.Compare(a.Locality.Region, b.Locality.Region); c != 0 {
		return c
	}
	if c := strings.Compare(a.Locality.Zone, b.Locality.Zone); c != 0 {
		return c
	}
	return strings.Compare(a.Locality.SubZone, b.Locality.SubZone)
}
