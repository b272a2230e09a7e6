package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/internal/strictyaml"
	"github.com/spillway/spillway/weights/zoneaware"
)

// Strategies the simulator can run.
const (
	StrategySpillway  = "spillway"
	StrategyHostCount = "hostcount"
	StrategyStatic    = "static"
)

var strategyNames = []string{StrategySpillway, StrategyHostCount, StrategyStatic}

// Leaf balancers: how a zone's traffic is spread over its pods.
const (
	LeafLeastLoaded = "least_loaded"
	LeafRoundRobin  = "round_robin"
)

// Event actions.
const (
	ActionScaleUp  = "scale_up"
	ActionRemove   = "remove"
	ActionThrottle = "throttle"
	ActionRecover  = "recover"
	ActionSurge    = "surge"
)

var actionNames = []string{ActionScaleUp, ActionRemove, ActionThrottle, ActionRecover, ActionSurge}

// Defaults of the scenario fields.
const (
	DefaultStep         = 10 * time.Second
	DefaultWarmup       = 2 * time.Minute
	DefaultColdCapacity = 0.1
	DefaultLatency      = 50 * time.Millisecond
	DefaultQueueGrowth  = 4.0
)

// Limits that keep a scenario (and a fuzzed one) small enough to run.
const (
	maxZones      = 32
	maxGroups     = 1000
	maxEvents     = 10000
	maxSteps      = 100000
	maxServers    = 100000 // pods in the fleet at any time
	maxInstances  = 10000000
	maxRate       = 1e9
	maxStep       = time.Hour
	maxWarmup     = time.Hour
	maxLatency    = time.Minute
	maxSurge      = 1000.0
	maxThrottle   = 10.0
	maxQueueGrow  = 1000.0
	maxNameLength = 63
)

// Scenario is a parsed, validated scenario file. Zone fields hold indexes
// into Zones.
type Scenario struct {
	Name, Description string
	Zones             []string
	Step              time.Duration
	Steps             int
	Seed              uint64
	Strategies        []string // at least one, no repeats
	Clients           []ClientGroup
	Servers           []ServerGroup
	Model             Model
	// Spillway is the zoneaware configuration of the spillway strategy;
	// ReportInterval is always Step.
	Spillway zoneaware.Config
	Events   []Event // sorted by Step, file order within a step
	// Subset, or nil, is the subset section: subsets of the last step's
	// fleet, compared by mode (see subsetsim.go).
	Subset *SubsetOptions
}

// ClientGroup is a set of identical client instances in one zone.
type ClientGroup struct {
	Name      string // unique; defaults to the zone name
	Zone      int
	Instances int
	RPS       float64 // per instance
}

// ServerGroup is a set of identical pods of the service in one zone.
type ServerGroup struct {
	Zone     int
	Count    int
	Capacity float64 // requests per second one warm pod serves
	// New: the pods register at step 0, as in a fresh deploy, instead of
	// long before the run. They serve at full capacity (the model's
	// warm-up applies to pods that join by an event); what changes is
	// that spillway sees every one of them as new.
	New bool
}

// Model tunes the simulated fleet.
type Model struct {
	// Warmup is how long a new pod takes to reach full capacity; it
	// starts at ColdCapacity of it and ramps up linearly.
	Warmup       time.Duration
	ColdCapacity float64
	// Latency is a request's latency on an idle, warm, unthrottled pod; a
	// pod's in-flight requests follow from it (Little's law).
	Latency time.Duration
	// QueueGrowth is how steeply in-flight requests grow above capacity.
	QueueGrowth float64
	// Noise is the relative standard deviation of each client group's rate
	// each step (seeded by Scenario.Seed); 0 is a constant rate.
	Noise float64
	// Leaf is how a zone's traffic is spread over its pods.
	Leaf string
}

// Event changes the fleet at the start of a step.
type Event struct {
	Step   int
	Action string
	Zone   int     // scale_up, remove, throttle, recover
	Group  int     // surge: index in Clients
	Count  int     // scale_up, remove
	Factor float64 // throttle, surge
	// Capacity of the pods scale_up adds (rps each).
	Capacity float64
	// Index is the event's position in the file's events list, Line its
	// line.
	Index, Line int
}

// ScenarioError is a scenario file that cannot be used. Field is the path
// of the bad field, e.g. "clients[1].rps"; it is empty only when the file
// is not well-formed YAML. Line is 1-based, 0 when unknown.
type ScenarioError struct {
	Line  int
	Field string
	Msg   string
}

func (e *ScenarioError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func fieldErr(n *yaml.Node, field, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ScenarioError{Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ParseScenario reads and validates a scenario. Every error is a
// *ScenarioError naming the field and its line.
func ParseScenario(data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ScenarioError{Field: "file", Msg: "empty scenario"}
		}
		return nil, &ScenarioError{Msg: "malformed YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, &ScenarioError{Msg: "malformed YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		return nil, &ScenarioError{Line: extra.Line, Field: "file", Msg: "more than one YAML document; a scenario is one"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) != 1 {
			return nil, fieldErr(root, "file", "want one YAML document")
		}
		root = root.Content[0]
	}
	return parseRoot(root)
}

var rootFields = []string{"name", "description", "zones", "step", "steps", "seed", "strategy", "compare", "clients", "servers", "model", "spillway", "events", "subset"}

// parseRoot reads the scenario's top-level mapping, field by field in
// the order later fields depend on: zones before everything that names
// one, steps before events, clients before the events that name a group,
// the events before subset (which sizes the last step's fleet).
func parseRoot(root *yaml.Node) (*Scenario, error) {
	f, err := mapping(root, "", rootFields)
	if err != nil {
		return nil, err
	}
	sc := &Scenario{Step: DefaultStep}
	if n := f["name"]; n != nil {
		if sc.Name, err = str(n, "name"); err != nil {
			return nil, err
		}
	}
	if n := f["description"]; n != nil {
		if sc.Description, err = str(n, "description"); err != nil {
			return nil, err
		}
	}
	zones, err := parseZones(root, f["zones"])
	if err != nil {
		return nil, err
	}
	sc.Zones = zones.names
	if err := parseTiming(root, f, sc); err != nil {
		return nil, err
	}
	if sc.Strategies, err = parseStrategies(f["strategy"], f["compare"]); err != nil {
		return nil, err
	}
	var groupIdx map[string]int
	if sc.Clients, groupIdx, err = parseClients(root, f["clients"], zones); err != nil {
		return nil, err
	}
	var pods []int
	if sc.Servers, pods, err = parseServers(root, f["servers"], zones); err != nil {
		return nil, err
	}
	if sc.Model, err = model(f["model"]); err != nil {
		return nil, err
	}
	if sc.Spillway, err = spillwayConfig(f["spillway"], sc.Step); err != nil {
		return nil, err
	}
	if n := f["events"]; n != nil && !strictyaml.IsNull(n) {
		if sc.Events, err = parseEvents(n, sc, zones, groupIdx); err != nil {
			return nil, err
		}
		if err := checkPods(sc, pods); err != nil {
			return nil, err
		}
	}
	// After the events: checkPods has left pods at the fleet's last step.
	if n := f["subset"]; n != nil && !strictyaml.IsNull(n) {
		if sc.Subset, err = parseSubset(n, sc, pods); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// zoneIndex is the scenario's zones, in file order and by name.
type zoneIndex struct {
	names []string
	idx   map[string]int
}

// ref reads the zone name at path and returns its index in the zones; a
// name that is not one of them is refused.
func (z *zoneIndex) ref(n *yaml.Node, path string) (int, error) {
	name, err := str(n, path)
	if err != nil {
		return 0, err
	}
	i, ok := z.idx[name]
	if !ok {
		return 0, fieldErr(n, path, "zone %q is not in zones %v", name, z.names)
	}
	return i, nil
}

// parseZones reads the required zones list, zn (nil when the field is
// missing from root): 1..maxZones valid names, none twice.
func parseZones(root, zn *yaml.Node) (*zoneIndex, error) {
	if zn == nil {
		return nil, fieldErr(root, "zones", "is required: the list of zone names")
	}
	items, err := sequence(zn, "zones")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 || len(items) > maxZones {
		return nil, fieldErr(zn, "zones", "%d zones, want 1..%d", len(items), maxZones)
	}
	zones := &zoneIndex{idx: map[string]int{}}
	for i, n := range items {
		path := fmt.Sprintf("zones[%d]", i)
		z, err := str(n, path)
		if err != nil {
			return nil, err
		}
		if err := validName(z); err != nil {
			return nil, fieldErr(n, path, "%q: %v", z, err)
		}
		if j, dup := zones.idx[z]; dup {
			return nil, fieldErr(n, path, "zone %q is already zones[%d]", z, j)
		}
		zones.idx[z] = i
		zones.names = append(zones.names, z)
	}
	return zones, nil
}

// parseTiming reads step (default DefaultStep), the required steps and
// seed (default 0) of the top-level fields f into sc.
func parseTiming(root *yaml.Node, f map[string]*yaml.Node, sc *Scenario) error {
	var err error
	if n := f["step"]; n != nil {
		if sc.Step, err = duration(n, "step", time.Second, maxStep); err != nil {
			return err
		}
	}
	n := f["steps"]
	if n == nil {
		return fieldErr(root, "steps", "is required: how many steps to simulate")
	}
	if sc.Steps, err = integer(n, "steps", 1, maxSteps); err != nil {
		return err
	}
	if n := f["seed"]; n != nil {
		seed, err := integer(n, "seed", 0, math.MaxInt64)
		if err != nil {
			return err
		}
		sc.Seed = uint64(seed)
	}
	return nil
}

// parseStrategies decides which strategies run from the strategy field s
// (one) or the compare field c (a list, no repeats), either nil when
// missing: not both; neither runs spillway alone.
func parseStrategies(s, c *yaml.Node) ([]string, error) {
	switch {
	case s != nil && c != nil:
		return nil, fieldErr(c, "compare", "set strategy or compare, not both")
	case s != nil:
		name, err := strategy(s, "strategy")
		if err != nil {
			return nil, err
		}
		return []string{name}, nil
	case c != nil:
		items, err := sequence(c, "compare")
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return nil, fieldErr(c, "compare", "empty list, want one or more of %s", strings.Join(strategyNames, ", "))
		}
		var names []string
		for i, n := range items {
			path := fmt.Sprintf("compare[%d]", i)
			name, err := strategy(n, path)
			if err != nil {
				return nil, err
			}
			if slices.Contains(names, name) {
				return nil, fieldErr(n, path, "%q is listed twice", name)
			}
			names = append(names, name)
		}
		return names, nil
	default:
		return []string{StrategySpillway}, nil
	}
}

// parseClients reads the required clients list, cn (nil when missing
// from root): 1..maxGroups groups, each named (by default after its zone)
// differently from the others. It returns the groups and their indexes
// by name.
func parseClients(root, cn *yaml.Node, zones *zoneIndex) ([]ClientGroup, map[string]int, error) {
	if cn == nil {
		return nil, nil, fieldErr(root, "clients", "is required: the client groups")
	}
	items, err := sequence(cn, "clients")
	if err != nil {
		return nil, nil, err
	}
	if len(items) == 0 || len(items) > maxGroups {
		return nil, nil, fieldErr(cn, "clients", "%d groups, want 1..%d", len(items), maxGroups)
	}
	var groups []ClientGroup
	groupIdx := map[string]int{}
	for i, n := range items {
		path := fmt.Sprintf("clients[%d]", i)
		g, err := clientGroup(n, path, zones.ref)
		if err != nil {
			return nil, nil, err
		}
		if g.Name == "" {
			g.Name = zones.names[g.Zone]
		}
		if j, dup := groupIdx[g.Name]; dup {
			return nil, nil, fieldErr(n, path+".name", "group %q is already clients[%d] (give groups in one zone a name)", g.Name, j)
		}
		groupIdx[g.Name] = i
		groups = append(groups, g)
	}
	return groups, groupIdx, nil
}

// parseServers reads the required servers list, sn (nil when missing
// from root): 1..maxGroups groups of at most maxServers pods in all. It
// returns the groups and the pods per zone.
func parseServers(root, sn *yaml.Node, zones *zoneIndex) ([]ServerGroup, []int, error) {
	if sn == nil {
		return nil, nil, fieldErr(root, "servers", "is required: the server groups")
	}
	items, err := sequence(sn, "servers")
	if err != nil {
		return nil, nil, err
	}
	if len(items) == 0 || len(items) > maxGroups {
		return nil, nil, fieldErr(sn, "servers", "%d groups, want 1..%d", len(items), maxGroups)
	}
	var groups []ServerGroup
	pods := make([]int, len(zones.names))
	total := 0
	for i, n := range items {
		path := fmt.Sprintf("servers[%d]", i)
		g, err := serverGroup(n, path, zones.ref)
		if err != nil {
			return nil, nil, err
		}
		pods[g.Zone] += g.Count
		if total += g.Count; total > maxServers {
			return nil, nil, fieldErr(n, path+".count", "%d pods in all, want at most %d", total, maxServers)
		}
		groups = append(groups, g)
	}
	return groups, pods, nil
}

// parseEvents reads the events list n (at most maxEvents) against the
// zones, steps, servers and client groups already read, and returns the
// events sorted by step, file order within a step.
func parseEvents(n *yaml.Node, sc *Scenario, zones *zoneIndex, groupIdx map[string]int) ([]Event, error) {
	items, err := sequence(n, "events")
	if err != nil {
		return nil, err
	}
	if len(items) > maxEvents {
		return nil, fieldErr(n, "events", "%d events, want at most %d", len(items), maxEvents)
	}
	var events []Event
	for i, n := range items {
		e, err := event(n, fmt.Sprintf("events[%d]", i), sc, zones.ref, groupIdx)
		if err != nil {
			return nil, err
		}
		e.Index = i
		events = append(events, e)
	}
	slices.SortStableFunc(events, func(a, b Event) int { return a.Step - b.Step })
	return events, nil
}

// checkPods replays the scale_up and remove events on pod counts: a
// remove must find the pods it removes, and the fleet stays under
// maxServers.
func checkPods(sc *Scenario, pods []int) error {
	total := 0
	for _, p := range pods {
		total += p
	}
	for _, e := range sc.Events {
		path := fmt.Sprintf("events[%d].count", e.Index)
		switch e.Action {
		case ActionScaleUp:
			pods[e.Zone] += e.Count
			if total += e.Count; total > maxServers {
				return &ScenarioError{Line: e.Line, Field: path, Msg: fmt.Sprintf("%d pods in all at step %d, want at most %d", total, e.Step, maxServers)}
			}
		case ActionRemove:
			if e.Count > pods[e.Zone] {
				return &ScenarioError{Line: e.Line, Field: path, Msg: fmt.Sprintf("removes %d pods but zone %s has %d at step %d", e.Count, sc.Zones[e.Zone], pods[e.Zone], e.Step)}
			}
			pods[e.Zone] -= e.Count
			total -= e.Count
		}
	}
	return nil
}

func strategy(n *yaml.Node, path string) (string, error) {
	s, err := str(n, path)
	if err != nil {
		return "", err
	}
	if !slices.Contains(strategyNames, s) {
		return "", fieldErr(n, path, "unknown strategy %q, want one of %s", s, strings.Join(strategyNames, ", "))
	}
	return s, nil
}

func clientGroup(n *yaml.Node, path string, zoneRef func(*yaml.Node, string) (int, error)) (ClientGroup, error) {
	f, err := mapping(n, path, []string{"name", "zone", "instances", "rps"})
	if err != nil {
		return ClientGroup{}, err
	}
	var g ClientGroup
	if v := f["name"]; v != nil {
		if g.Name, err = str(v, path+".name"); err != nil {
			return g, err
		}
		if err := validName(g.Name); err != nil {
			return g, fieldErr(v, path+".name", "%q: %v", g.Name, err)
		}
	}
	if err := required(n, f, path, "zone", "instances", "rps"); err != nil {
		return g, err
	}
	if g.Zone, err = zoneRef(f["zone"], path+".zone"); err != nil {
		return g, err
	}
	if g.Instances, err = integer(f["instances"], path+".instances", 0, maxInstances); err != nil {
		return g, err
	}
	if g.RPS, err = number(f["rps"], path+".rps", 0, maxRate); err != nil {
		return g, err
	}
	return g, nil
}

func serverGroup(n *yaml.Node, path string, zoneRef func(*yaml.Node, string) (int, error)) (ServerGroup, error) {
	f, err := mapping(n, path, []string{"zone", "count", "capacity", "new"})
	if err != nil {
		return ServerGroup{}, err
	}
	var g ServerGroup
	if err := required(n, f, path, "zone", "count", "capacity"); err != nil {
		return g, err
	}
	if g.Zone, err = zoneRef(f["zone"], path+".zone"); err != nil {
		return g, err
	}
	if g.Count, err = integer(f["count"], path+".count", 0, maxServers); err != nil {
		return g, err
	}
	if g.Capacity, err = positive(f["capacity"], path+".capacity", maxRate); err != nil {
		return g, err
	}
	if v := f["new"]; v != nil {
		if err := v.Decode(&g.New); err != nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
			return g, fieldErr(v, path+".new", "%s, want true or false", strictyaml.Describe(v))
		}
	}
	return g, nil
}

func model(n *yaml.Node) (Model, error) {
	m := Model{Warmup: DefaultWarmup, ColdCapacity: DefaultColdCapacity, Latency: DefaultLatency, QueueGrowth: DefaultQueueGrowth, Leaf: LeafLeastLoaded}
	if n == nil || strictyaml.IsNull(n) {
		return m, nil
	}
	f, err := mapping(n, "model", []string{"warmup", "cold_capacity", "latency", "queue_growth", "noise", "leaf"})
	if err != nil {
		return m, err
	}
	if v := f["warmup"]; v != nil {
		if m.Warmup, err = duration(v, "model.warmup", 0, maxWarmup); err != nil {
			return m, err
		}
	}
	if v := f["cold_capacity"]; v != nil {
		if m.ColdCapacity, err = number(v, "model.cold_capacity", 0, 1); err != nil {
			return m, err
		}
	}
	if v := f["latency"]; v != nil {
		if m.Latency, err = duration(v, "model.latency", time.Microsecond, maxLatency); err != nil {
			return m, err
		}
	}
	if v := f["queue_growth"]; v != nil {
		if m.QueueGrowth, err = number(v, "model.queue_growth", 0, maxQueueGrow); err != nil {
			return m, err
		}
	}
	if v := f["noise"]; v != nil {
		if m.Noise, err = number(v, "model.noise", 0, 1); err != nil {
			return m, err
		}
	}
	if v := f["leaf"]; v != nil {
		if m.Leaf, err = str(v, "model.leaf"); err != nil {
			return m, err
		}
		if m.Leaf != LeafLeastLoaded && m.Leaf != LeafRoundRobin {
			return m, fieldErr(v, "model.leaf", "unknown leaf balancer %q, want %s or %s", m.Leaf, LeafLeastLoaded, LeafRoundRobin)
		}
	}
	return m, nil
}

// spillwayFields are the zoneaware.Config knobs a scenario may set, by
// YAML name. Each setter returns the Config with only that knob set, so
// that zoneaware.New can judge it alone and the error names the field.
var spillwayFields = []struct {
	name string
	kind string // "number" (0 allowed), "nonzero" (0 would mean the default), "duration" or "int"
	set  func(c *zoneaware.Config, f float64, d time.Duration)
}{
	{"probe_share", "number", func(c *zoneaware.Config, f float64, _ time.Duration) { c.ProbeShare = new(f) }},
	{"target_utilization", "nonzero", func(c *zoneaware.Config, f float64, _ time.Duration) { c.TargetUtilization = f }},
	{"slow_start_fraction", "nonzero", func(c *zoneaware.Config, f float64, _ time.Duration) { c.SlowStartFraction = f }},
	{"slow_start_ramp", "duration", func(c *zoneaware.Config, _ float64, d time.Duration) { c.SlowStartRamp = d }},
	{"slow_start_requests", "nonzero", func(c *zoneaware.Config, f float64, _ time.Duration) { c.SlowStartRequests = f }},
	{"queue_sensitivity", "number", func(c *zoneaware.Config, f float64, _ time.Duration) { c.QueueSensitivity = new(f) }},
	{"error_sensitivity", "number", func(c *zoneaware.Config, f float64, _ time.Duration) { c.ErrorSensitivity = new(f) }},
	{"capacity_floor", "nonzero", func(c *zoneaware.Config, f float64, _ time.Duration) { c.CapacityFloor = f }},
	{"recovery_ramp", "duration", func(c *zoneaware.Config, _ float64, d time.Duration) { c.RecoveryRamp = d }},
	{"degraded_target", "nonzero", func(c *zoneaware.Config, f float64, _ time.Duration) { c.DegradedTarget = f }},
	{"stale_after", "int", func(c *zoneaware.Config, f float64, _ time.Duration) { c.StaleAfter = int(f) }},
	{"move_threshold", "number", func(c *zoneaware.Config, f float64, _ time.Duration) { c.MoveThreshold = new(f) }},
}

func spillwayConfig(n *yaml.Node, step time.Duration) (zoneaware.Config, error) {
	cfg := zoneaware.Config{ReportInterval: step}
	if n == nil || strictyaml.IsNull(n) {
		return cfg, nil
	}
	names := make([]string, len(spillwayFields))
	for i, sf := range spillwayFields {
		names[i] = sf.name
	}
	f, err := mapping(n, "spillway", names)
	if err != nil {
		return cfg, err
	}
	for _, sf := range spillwayFields {
		v := f[sf.name]
		if v == nil {
			continue
		}
		path := "spillway." + sf.name
		var x float64
		var d time.Duration
		switch sf.kind {
		case "duration":
			if d, err = duration(v, path, time.Millisecond, 24*time.Hour); err != nil {
				return cfg, err
			}
		case "int":
			i, err := integer(v, path, 1, 1000)
			if err != nil {
				return cfg, err
			}
			x = float64(i)
		default:
			if x, err = number(v, path, -math.MaxFloat64, math.MaxFloat64); err != nil {
				return cfg, err
			}
			if x == 0 && sf.kind == "nonzero" {
				// zoneaware reads a zero as "the default": refuse it rather
				// than run something the file does not say.
				return cfg, fieldErr(v, path, "0 is not allowed (leave the field out for the default)")
			}
		}
		alone := zoneaware.Config{ReportInterval: step}
		sf.set(&alone, x, d)
		if _, err := zoneaware.New(alone); err != nil {
			// "invalid zoneaware config: ProbeShare 0.5: want 0..0.2":
			// keep the range, name the YAML field.
			msg := err.Error()
			if i := strings.LastIndex(msg, ": "); i >= 0 {
				msg = msg[i+2:]
			}
			return cfg, fieldErr(v, path, "%s, %s", strictyaml.Describe(v), msg)
		}
		sf.set(&cfg, x, d)
	}
	if _, err := zoneaware.New(cfg); err != nil {
		return cfg, fieldErr(n, "spillway", "%v", err)
	}
	return cfg, nil
}

var eventFields = map[string][]string{
	ActionScaleUp:  {"zone", "count"},
	ActionRemove:   {"zone", "count"},
	ActionThrottle: {"zone", "factor"},
	ActionRecover:  {"zone"},
	ActionSurge:    {"clients", "factor"},
}

func event(n *yaml.Node, path string, sc *Scenario, zoneRef func(*yaml.Node, string) (int, error), groups map[string]int) (Event, error) {
	f, err := mapping(n, path, []string{"step", "action", "zone", "count", "factor", "clients", "capacity"})
	if err != nil {
		return Event{}, err
	}
	e := Event{Line: n.Line}
	if err := required(n, f, path, "step", "action"); err != nil {
		return e, err
	}
	if e.Step, err = integer(f["step"], path+".step", 0, sc.Steps-1); err != nil {
		return e, err
	}
	if e.Action, err = str(f["action"], path+".action"); err != nil {
		return e, err
	}
	want, ok := eventFields[e.Action]
	if !ok {
		return e, fieldErr(f["action"], path+".action", "unknown action %q, want one of %s", e.Action, strings.Join(actionNames, ", "))
	}
	allowed := append([]string{"step", "action"}, want...)
	if e.Action == ActionScaleUp {
		allowed = append(allowed, "capacity")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !slices.Contains(allowed, k.Value) {
			return e, fieldErr(k, path+"."+k.Value, "not a field of action %s (want %s)", e.Action, strings.Join(allowed, ", "))
		}
	}
	if err := required(n, f, path, want...); err != nil {
		return e, err
	}
	if v := f["zone"]; v != nil {
		if e.Zone, err = zoneRef(v, path+".zone"); err != nil {
			return e, err
		}
	}
	if v := f["count"]; v != nil {
		if e.Count, err = integer(v, path+".count", 1, maxServers); err != nil {
			return e, err
		}
	}
	if v := f["clients"]; v != nil {
		name, err := str(v, path+".clients")
		if err != nil {
			return e, err
		}
		i, ok := groups[name]
		if !ok {
			return e, fieldErr(v, path+".clients", "no client group named %q", name)
		}
		e.Group = i
	}
	if v := f["factor"]; v != nil {
		hi := maxSurge
		if e.Action == ActionThrottle {
			hi = maxThrottle
		}
		if e.Factor, err = number(v, path+".factor", 0, hi); err != nil {
			return e, err
		}
	}
	if e.Action == ActionScaleUp {
		if v := f["capacity"]; v != nil {
			if e.Capacity, err = positive(v, path+".capacity", maxRate); err != nil {
				return e, err
			}
		} else {
			i := slices.IndexFunc(sc.Servers, func(g ServerGroup) bool { return g.Zone == e.Zone })
			if i < 0 {
				return e, fieldErr(n, path+".capacity", "is required: zone %s has no server group to take it from", sc.Zones[e.Zone])
			}
			e.Capacity = sc.Servers[i].Capacity
		}
	}
	return e, nil
}

// validName accepts zone and group names that are safe as CSV column
// suffixes and SVG text: letters, digits, '.', '_' and '-'.
func validName(s string) error {
	if s == "" || len(s) > maxNameLength {
		return fmt.Errorf("want 1..%d characters", maxNameLength)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return errors.New("want only letters, digits, '.', '_' and '-'")
		}
	}
	return nil
}

// mapping checks that n is a mapping whose keys are all in known and none
// repeats, and returns the value nodes by key.
func mapping(n *yaml.Node, path string, known []string) (map[string]*yaml.Node, error) {
	where := path
	if where == "" {
		where = "file"
	}
	if err := noAlias(n, where); err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, fieldErr(n, where, "want a mapping with fields %s, got %s", strings.Join(known, ", "), strictyaml.Describe(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fieldErr(k, where, "want a field name, got %s", strictyaml.Describe(k))
		}
		name := k.Value
		if name == "" {
			name = `""`
		}
		fpath := strictyaml.Join(path, name)
		if !slices.Contains(known, k.Value) {
			return nil, fieldErr(k, fpath, "unknown field (want one of %s)", strings.Join(known, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, fieldErr(k, fpath, "field is listed twice")
		}
		if err := noAlias(v, fpath); err != nil {
			return nil, err
		}
		out[k.Value] = v
	}
	return out, nil
}

func required(n *yaml.Node, f map[string]*yaml.Node, path string, keys ...string) error {
	for _, k := range keys {
		if f[k] == nil {
			return fieldErr(n, path+"."+k, "is required")
		}
	}
	return nil
}

// strict is the strictyaml parser behind the checks whose refusals are
// worded as the scenario's own; its errors become *ScenarioError (see
// fromStrict).
var strict = strictyaml.Parser{File: "scenario"}

// fromStrict turns a strictyaml refusal into the *ScenarioError users
// see: the same line, field and message.
func fromStrict(err error) error {
	var se *strictyaml.Error
	if errors.As(err, &se) {
		return &ScenarioError{Line: se.Line, Field: se.Field, Msg: se.Msg}
	}
	return err
}

func sequence(n *yaml.Node, path string) ([]*yaml.Node, error) {
	if err := noAlias(n, path); err != nil {
		return nil, err
	}
	items, err := strict.List(n, path)
	return items, fromStrict(err)
}

func str(n *yaml.Node, path string) (string, error) {
	if err := noAlias(n, path); err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode || strictyaml.IsNull(n) {
		return "", fieldErr(n, path, "want a string, got %s", strictyaml.Describe(n))
	}
	return n.Value, nil
}

// number reads a finite number in [lo, hi].
func number(n *yaml.Node, path string, lo, hi float64) (float64, error) {
	if err := noAlias(n, path); err != nil {
		return 0, err
	}
	bad := func() error {
		if hi == math.MaxFloat64 {
			return fieldErr(n, path, "%s, want a number", strictyaml.Describe(n))
		}
		return fieldErr(n, path, "%s, want a number in %g..%g", strictyaml.Describe(n), lo, hi)
	}
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return 0, bad()
	}
	var v float64
	if err := n.Decode(&v); err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
		return 0, bad()
	}
	return v, nil
}

// positive reads a finite number in (0, hi].
func positive(n *yaml.Node, path string, hi float64) (float64, error) {
	v, err := number(n, path, 0, hi)
	if err == nil && v == 0 {
		err = fieldErr(n, path, "0, want a number above 0, at most %g", hi)
	}
	return v, err
}

// integer reads a whole number in [lo, hi].
func integer(n *yaml.Node, path string, lo, hi int) (int, error) {
	if err := noAlias(n, path); err != nil {
		return 0, err
	}
	bad := fieldErr(n, path, "%s, want a whole number %d..%d", strictyaml.Describe(n), lo, hi)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, bad
	}
	var v int64
	if err := n.Decode(&v); err != nil || v < int64(lo) || v > int64(hi) {
		return 0, bad
	}
	return int(v), nil
}

// duration reads a Go duration ("10s", "1m30s") in [lo, hi].
func duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, error) {
	if err := noAlias(n, path); err != nil {
		return 0, err
	}
	bad := fieldErr(n, path, "%s, want a duration like 10s or 2m, %v..%v", strictyaml.Describe(n), lo, hi)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return 0, bad
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil || d < lo || d > hi {
		return 0, bad
	}
	return d, nil
}

// noAlias rejects YAML aliases: following them could expand a small file
// exponentially.
func noAlias(n *yaml.Node, path string) error {
	if n.Kind == yaml.AliasNode {
		return fieldErr(n, path, "YAML aliases (*%s) are not supported", n.Value)
	}
	return nil
}
