package svcconfig

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/internal/strictyaml"
	"github.com/spillway/spillway/registry/names"
	"github.com/spillway/spillway/weights/regions"
)

// ErrInvalid is wrapped by every parse and validation error.
var ErrInvalid = errors.New("invalid service config")

// MaxBytes bounds one service's config.
const MaxBytes = 64 << 10

// Strategies.
const (
	ZoneAware    = "zone-aware"
	PID          = "pid"
	ZoneAwarePID = "zone-aware+pid"
	Static       = "static"
)

// Metrics.
const (
	MetricMax      = "max"
	MetricCPU      = "cpu"
	MetricInflight = "inflight"
)

// Duration is a time.Duration written as "10s" in YAML and JSON.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("duration: want a string such as \"10s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Config is one service's weight strategy and its knobs. The zero value
// is not valid; Default returns the config of a service without one, and
// Parse fills every field the file leaves out from Default.
type Config struct {
	// Strategy: zone-aware (the default: locality weights, equal endpoint
	// weights), pid (per-endpoint PID weights, one locality), zone-aware+pid
	// (zone-aware decides per zone, PID splits inside it) or static (the
	// registered endpoint weights as they are).
	Strategy string `json:"strategy"`
	// ProbeShare is the least share of a client zone's traffic sent to each
	// other healthy zone, 0..0.5; default 0.01.
	ProbeShare float64 `json:"probe_share"`
	// Headroom is the target utilization of a zone's capacity, (0,1];
	// default 1 (fill a zone to its full capacity share, as zone-aware
	// weights do without a config).
	Headroom float64 `json:"headroom"`
	// SlowStart is how a new endpoint earns its weight.
	SlowStart SlowStart `json:"slow_start"`
	// PID is the per-endpoint controller (strategies pid, zone-aware+pid).
	PID PIDConfig `json:"pid"`
	// Metric is the utilization the controller balances: max (the default:
	// max of cpu and in-flight/limit), cpu or inflight.
	Metric string `json:"metric"`
	// ReportInterval is how often backends report utilization, 1s..10m;
	// default 10s.
	ReportInterval Duration `json:"report_interval"`
	// Blend, non-nil, moves the service between two strategies: weights =
	// from×(1−percent/100) + to×percent/100 of the normalised weights.
	Blend *Blend `json:"blend,omitempty"`
	// Redirects send the clients of one region to another region's
	// endpoints (package regions), each until its Until when set.
	Redirects []Redirect `json:"redirects,omitempty"`
	// Exclude leaves regions' endpoints out for every client, each until
	// its Until when set (not when that would leave no endpoints).
	Exclude []Exclusion `json:"exclude,omitempty"`
	// SubsetMode gives each xDS client a subset of the endpoints (package
	// weights/subset): off (the default: every client gets every
	// endpoint), deterministic (balanced: every endpoint gets the same
	// number of clients) or random (for comparison).
	SubsetMode string `json:"subset_mode,omitempty"`
	// SubsetSize is how many endpoints a client gets, 1..1000; required
	// unless SubsetMode is off.
	SubsetSize int `json:"subset_size,omitempty"`
	// Resilience is what the service's xDS clients are told to do about
	// failures and load (outlier detection, retries, timeouts, circuit
	// breaking, fault injection, the endpoint-picking policy); the zero
	// value sends none.
	Resilience Resilience `json:"resilience,omitzero"`
}

// Redirect is "clients in From use To's endpoints".
type Redirect struct {
	From  string     `json:"from"`
	To    string     `json:"to"`
	Until *time.Time `json:"until,omitempty"` // nil: until removed
}

// Exclusion is "no client uses Region's endpoints".
type Exclusion struct {
	Region string     `json:"region"`
	Until  *time.Time `json:"until,omitempty"` // nil: until removed
}

// SlowStart is the cold-start trust of a new endpoint.
type SlowStart struct {
	// Fraction is the share of a full weight a new endpoint starts at,
	// (0,1]; default 0.05.
	Fraction float64 `json:"fraction"`
	// Ramp is how long it takes to reach full weight, 0..1h; default 60s.
	Ramp Duration `json:"ramp"`
	// Requests is how many successful requests earn a new endpoint full
	// trust when its zone has load reports, ≥1; default 1000.
	Requests int64 `json:"requests"`
}

// PIDConfig tunes the per-endpoint controller.
type PIDConfig struct {
	// Kp, Ki, Kd are the gains on the relative error (setpoint −
	// utilization) / setpoint, in units of the mean weight (weights/pid),
	// each 0..10; defaults 0.5, 0.02, 0.
	Kp float64 `json:"kp"`
	Ki float64 `json:"ki"`
	Kd float64 `json:"kd"`
	// MinWeight and MaxWeight bound a weight relative to the service's
	// mean weight: min in (0, 1], max in [1, 100]; defaults 0.1 and 5.
	MinWeight float64 `json:"min_weight"`
	MaxWeight float64 `json:"max_weight"`
	// InitialWeight is a new endpoint's weight relative to the mean,
	// within the bounds; default 0.2 (a cold endpoint starts low).
	InitialWeight float64 `json:"initial_weight"`
	// SkipMissingShare: a round is skipped (weights hold) when more than
	// this share of endpoints have no fresh report, (0,1]; default 0.3.
	SkipMissingShare float64 `json:"skip_missing_share"`
	// Target is a fixed utilization setpoint, (0,1]; 0 (the default) means
	// the service's mean utilization.
	Target float64 `json:"target"`
	// ErrorGuard is the brake on a death spiral (package weights/pid): an
	// endpoint whose error rate or latency is well above the service's
	// median is never raised and is pulled down; default true. It reads
	// the requests, errors and latency backends report
	// (clientlib/utilization).
	ErrorGuard bool `json:"error_guard"`
	// ErrorPenalty is gRFC A58's error-utilization penalty: the controller
	// steers utilization + error rate × penalty, 0..10; default 1, 0 off.
	ErrorPenalty float64 `json:"error_penalty"`
	// MinRPS is the request rate a report needs for its errors and
	// latency to count, (0, 1e6]; default 1.
	MinRPS float64 `json:"min_rps"`
}

// Blend is a gradual move from one strategy to another.
type Blend struct {
	From    string  `json:"from"`
	To      string  `json:"to"`
	Percent float64 `json:"percent"` // 0..100, the share of To
}

// Default is the config of a service that has none.
func Default() Config {
	return Config{
		Strategy:       ZoneAware,
		ProbeShare:     0.01,
		Headroom:       1,
		SlowStart:      SlowStart{Fraction: 0.05, Ramp: Duration(60 * time.Second), Requests: 1000},
		PID:            PIDConfig{Kp: 0.5, Ki: 0.02, MinWeight: 0.1, MaxWeight: 5, InitialWeight: 0.2, SkipMissingShare: 0.3, ErrorGuard: true, ErrorPenalty: 1, MinRPS: 1},
		Metric:         MetricMax,
		ReportInterval: Duration(10 * time.Second),
	}
}

// ServiceFromFile returns the service a config file is for: its base name
// without ".yaml", validated as a service name.
func ServiceFromFile(path string) (string, error) { return kind.ServiceFromFile(path) }

// Error is a parse or validation error at a line of a file; it unwraps
// to ErrInvalid.
type Error = strictyaml.Error

// Parse reads one service's config, YAML or JSON, strictly: an unknown
// field, a wrong type or a value out of range is an *Error naming file,
// line and field. An empty document is the defaults.
func Parse(file string, data []byte) (Config, error) {
	c := Default()
	p := parser{strictyaml.Parser{File: file, Kind: ErrInvalid}}
	root, err := p.Document(data, MaxBytes, "the file holds one")
	if err != nil || root == nil {
		return c, err
	}
	if err := p.config(root, &c); err != nil {
		return Default(), err
	}
	return c, nil
}

// parser reads the config's nodes with the shared strict checks.
type parser struct{ strictyaml.Parser }

func (p parser) float(n *yaml.Node, field string, lo, hi float64, loOpen bool) (float64, error) {
	s, err := p.Scalar(n, field)
	if err != nil {
		return 0, err
	}
	if n.Tag != "!!int" && n.Tag != "!!float" {
		return 0, p.Errf(n, field, "want a number, got %q", s)
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, p.Errf(n, field, "want a number, got %q", s)
	}
	if f < lo || f > hi || (loOpen && f == lo) {
		open := "["
		if loOpen {
			open = "("
		}
		return 0, p.Errf(n, field, "%v is out of range %s%v, %v]", f, open, lo, hi)
	}
	return f, nil
}

func (p parser) integer(n *yaml.Node, field string, lo, hi int64) (int64, error) {
	s, err := p.Scalar(n, field)
	if err != nil {
		return 0, err
	}
	if n.Tag != "!!int" {
		return 0, p.Errf(n, field, "want an integer, got %q", s)
	}
	i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		return 0, p.Errf(n, field, "want a decimal integer, got %q", s)
	}
	if i < lo || i > hi {
		return 0, p.Errf(n, field, "%d is out of range [%d, %d]", i, lo, hi)
	}
	return i, nil
}

func (p parser) duration(n *yaml.Node, field string, lo, hi time.Duration) (Duration, error) {
	s, err := p.Scalar(n, field)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, p.Errf(n, field, "want a duration such as 10s, got %q", s)
	}
	if d < lo || d > hi {
		return 0, p.Errf(n, field, "%v is out of range [%v, %v]", d, lo, hi)
	}
	return Duration(d), nil
}

func (p parser) boolean(n *yaml.Node, field string) (bool, error) {
	s, err := p.Scalar(n, field)
	if err != nil {
		return false, err
	}
	if n.Tag != "!!bool" {
		return false, p.Errf(n, field, "want true or false, got %q", s)
	}
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, p.Errf(n, field, "want true or false, got %q", s)
}

func (p parser) oneOf(n *yaml.Node, field string, allowed ...string) (string, error) {
	s, err := p.Scalar(n, field)
	if err != nil {
		return "", err
	}
	for _, a := range allowed {
		if s == a {
			return s, nil
		}
	}
	return "", p.Errf(n, field, "%q is not one of %s", s, strings.Join(allowed, ", "))
}

var strategies = []string{ZoneAware, PID, ZoneAwarePID, Static}

func (p parser) config(root *yaml.Node, c *Config) error {
	m, err := p.Mapping(root, "", "strategy", "probe_share", "headroom", "slow_start", "pid", "metric", "report_interval", "blend", "redirects", "exclude", "subset_mode", "subset_size", "resilience")
	if err != nil {
		return err
	}
	if n := m["strategy"]; n != nil {
		if c.Strategy, err = p.oneOf(n, "strategy", strategies...); err != nil {
			return err
		}
	}
	if n := m["probe_share"]; n != nil {
		if c.ProbeShare, err = p.float(n, "probe_share", 0, 0.5, false); err != nil {
			return err
		}
	}
	if n := m["headroom"]; n != nil {
		if c.Headroom, err = p.float(n, "headroom", 0, 1, true); err != nil {
			return err
		}
	}
	if n := m["metric"]; n != nil {
		if c.Metric, err = p.oneOf(n, "metric", MetricMax, MetricCPU, MetricInflight); err != nil {
			return err
		}
	}
	if n := m["report_interval"]; n != nil {
		if c.ReportInterval, err = p.duration(n, "report_interval", time.Second, 10*time.Minute); err != nil {
			return err
		}
	}
	if n := m["slow_start"]; n != nil {
		if err := p.slowStart(n, &c.SlowStart); err != nil {
			return err
		}
	}
	if n := m["pid"]; n != nil {
		if err := p.pid(n, &c.PID); err != nil {
			return err
		}
	}
	if n := m["blend"]; n != nil {
		b, err := p.blend(n)
		if err != nil {
			return err
		}
		if sn := m["strategy"]; sn != nil && c.Strategy != b.From && c.Strategy != b.To {
			return p.Errf(sn, "strategy", "%q is neither blend.from (%s) nor blend.to (%s)", c.Strategy, b.From, b.To)
		}
		c.Blend = b
	}
	if n := m["redirects"]; n != nil {
		if c.Redirects, err = p.redirects(n); err != nil {
			return err
		}
	}
	if n := m["exclude"]; n != nil {
		if c.Exclude, err = p.excludes(n); err != nil {
			return err
		}
	}
	if n := m["resilience"]; n != nil {
		if err := p.resilience(n, &c.Resilience); err != nil {
			return err
		}
	}
	return p.subset(m, c)
}

// Subset modes (SubsetMode).
const (
	SubsetOff           = "off"
	SubsetDeterministic = "deterministic"
	SubsetRandom        = "random"
)

// MaxSubsetSize bounds subset_size.
const MaxSubsetSize = 1000

// subset reads subset_mode and subset_size: a size needs a mode that is
// not off, and such a mode needs a size.
func (p parser) subset(m map[string]*yaml.Node, c *Config) error {
	var err error
	if n := m["subset_mode"]; n != nil {
		if c.SubsetMode, err = p.oneOf(n, "subset_mode", SubsetOff, SubsetDeterministic, SubsetRandom); err != nil {
			return err
		}
	}
	if n := m["subset_size"]; n != nil {
		v, err := p.integer(n, "subset_size", 1, MaxSubsetSize)
		if err != nil {
			return err
		}
		c.SubsetSize = int(v)
	}
	switch {
	case c.SubsetSize > 0 && (c.SubsetMode == "" || c.SubsetMode == SubsetOff):
		return p.Errf(m["subset_size"], "subset_size", "is set but subset_mode is %s: set subset_mode: deterministic to give clients subsets", cmpOr(c.SubsetMode, "not set"))
	case c.SubsetSize == 0 && c.SubsetMode != "" && c.SubsetMode != SubsetOff:
		return p.Errf(m["subset_mode"], "subset_mode", "is %s but subset_size is not set: how many endpoints should a client get?", c.SubsetMode)
	}
	if c.SubsetMode == SubsetOff {
		c.SubsetMode = "" // the default, as a config without it
	}
	return nil
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func (p parser) region(n *yaml.Node, field string) (string, error) {
	s, err := p.Scalar(n, field)
	if err != nil {
		return "", err
	}
	if err := names.ValidateLabel(field, s); err != nil {
		return "", p.Errf(n, field, "%q is not a region name (a DNS label)", s)
	}
	return s, nil
}

func (p parser) until(n *yaml.Node, field string) (*time.Time, error) {
	s, err := p.Scalar(n, field)
	if err != nil {
		return nil, err
	}
	u, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, p.Errf(n, field, "want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", s)
	}
	return &u, nil
}

func (p parser) redirects(n *yaml.Node) ([]Redirect, error) {
	items, err := p.List(n, "redirects")
	if err != nil {
		return nil, err
	}
	var out []Redirect
	for i, it := range items {
		f := fmt.Sprintf("redirects[%d]", i)
		m, err := p.Mapping(it, f, "from", "to", "until")
		if err != nil {
			return nil, err
		}
		var r Redirect
		for _, k := range []string{"from", "to"} {
			if m[k] == nil {
				return nil, p.Errf(it, f+"."+k, "missing")
			}
		}
		if r.From, err = p.region(m["from"], f+".from"); err != nil {
			return nil, err
		}
		if r.To, err = p.region(m["to"], f+".to"); err != nil {
			return nil, err
		}
		if r.From == r.To {
			return nil, p.Errf(m["to"], f+".to", "%q is the from region too; a redirect moves clients to another region", r.To)
		}
		for j, o := range out {
			if o.From == r.From {
				return nil, p.Errf(m["from"], f+".from", "%q is redirects[%d].from too; a region has one redirect", r.From, j)
			}
		}
		if v := m["until"]; v != nil {
			if r.Until, err = p.until(v, f+".until"); err != nil {
				return nil, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (p parser) excludes(n *yaml.Node) ([]Exclusion, error) {
	items, err := p.List(n, "exclude")
	if err != nil {
		return nil, err
	}
	var out []Exclusion
	for i, it := range items {
		f := fmt.Sprintf("exclude[%d]", i)
		m, err := p.Mapping(it, f, "region", "until")
		if err != nil {
			return nil, err
		}
		if m["region"] == nil {
			return nil, p.Errf(it, f+".region", "missing")
		}
		var e Exclusion
		if e.Region, err = p.region(m["region"], f+".region"); err != nil {
			return nil, err
		}
		for j, o := range out {
			if o.Region == e.Region {
				return nil, p.Errf(m["region"], f+".region", "%q is exclude[%d].region too", e.Region, j)
			}
		}
		if v := m["until"]; v != nil {
			if e.Until, err = p.until(v, f+".until"); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
	}
	return out, nil
}

func (p parser) slowStart(n *yaml.Node, s *SlowStart) error {
	m, err := p.Mapping(n, "slow_start", "fraction", "ramp", "requests")
	if err != nil {
		return err
	}
	if v := m["fraction"]; v != nil {
		if s.Fraction, err = p.float(v, "slow_start.fraction", 0, 1, true); err != nil {
			return err
		}
	}
	if v := m["ramp"]; v != nil {
		if s.Ramp, err = p.duration(v, "slow_start.ramp", 0, time.Hour); err != nil {
			return err
		}
	}
	if v := m["requests"]; v != nil {
		if s.Requests, err = p.integer(v, "slow_start.requests", 1, 1_000_000_000); err != nil {
			return err
		}
	}
	return nil
}

func (p parser) pid(n *yaml.Node, c *PIDConfig) error {
	m, err := p.Mapping(n, "pid", "kp", "ki", "kd", "min_weight", "max_weight", "initial_weight", "skip_missing_share", "target", "error_guard", "error_penalty", "min_rps")
	if err != nil {
		return err
	}
	for _, g := range []struct {
		k string
		v *float64
	}{{"kp", &c.Kp}, {"ki", &c.Ki}, {"kd", &c.Kd}} {
		if v := m[g.k]; v != nil {
			if *g.v, err = p.float(v, "pid."+g.k, 0, 10, false); err != nil {
				return err
			}
		}
	}
	if v := m["min_weight"]; v != nil {
		if c.MinWeight, err = p.float(v, "pid.min_weight", 0, 1, true); err != nil {
			return err
		}
	}
	if v := m["max_weight"]; v != nil {
		if c.MaxWeight, err = p.float(v, "pid.max_weight", 1, 100, false); err != nil {
			return err
		}
	}
	if v := m["initial_weight"]; v != nil {
		if c.InitialWeight, err = p.float(v, "pid.initial_weight", 0, 100, true); err != nil {
			return err
		}
	}
	if v := m["skip_missing_share"]; v != nil {
		if c.SkipMissingShare, err = p.float(v, "pid.skip_missing_share", 0, 1, true); err != nil {
			return err
		}
	}
	if v := m["target"]; v != nil {
		if c.Target, err = p.float(v, "pid.target", 0, 1, false); err != nil {
			return err
		}
	}
	if v := m["error_guard"]; v != nil {
		if c.ErrorGuard, err = p.boolean(v, "pid.error_guard"); err != nil {
			return err
		}
	}
	if v := m["error_penalty"]; v != nil {
		if c.ErrorPenalty, err = p.float(v, "pid.error_penalty", 0, 10, false); err != nil {
			return err
		}
	}
	if v := m["min_rps"]; v != nil {
		if c.MinRPS, err = p.float(v, "pid.min_rps", 0, 1e6, true); err != nil {
			return err
		}
	}
	if c.MinWeight > c.MaxWeight {
		at := m["min_weight"]
		if at == nil {
			at = m["max_weight"]
		}
		return p.Errf(at, "pid.min_weight", "%g is above pid.max_weight %g", c.MinWeight, c.MaxWeight)
	}
	if c.InitialWeight < c.MinWeight || c.InitialWeight > c.MaxWeight {
		at := m["initial_weight"]
		if at == nil {
			at = n
		}
		return p.Errf(at, "pid.initial_weight", "%g is outside [pid.min_weight %g, pid.max_weight %g]", c.InitialWeight, c.MinWeight, c.MaxWeight)
	}
	return nil
}

func (p parser) blend(n *yaml.Node) (*Blend, error) {
	m, err := p.Mapping(n, "blend", "from", "to", "percent")
	if err != nil {
		return nil, err
	}
	b := &Blend{}
	for _, k := range []string{"from", "to", "percent"} {
		if m[k] == nil {
			return nil, p.Errf(n, "blend."+k, "missing")
		}
	}
	if b.From, err = p.oneOf(m["from"], "blend.from", strategies...); err != nil {
		return nil, err
	}
	if b.To, err = p.oneOf(m["to"], "blend.to", strategies...); err != nil {
		return nil, err
	}
	if b.From == b.To {
		return nil, p.Errf(m["to"], "blend.to", "%q is blend.from too; a blend moves between two strategies", b.To)
	}
	if b.Percent, err = p.float(m["percent"], "blend.percent", 0, 100, false); err != nil {
		return nil, err
	}
	return b, nil
}

// RegionRules returns c's redirects and exclusions for package regions.
func (c Config) RegionRules() regions.Rules {
	var r regions.Rules
	at := func(u *time.Time) time.Time {
		if u == nil {
			return time.Time{}
		}
		return *u
	}
	for _, d := range c.Redirects {
		r.Redirects = append(r.Redirects, regions.Redirect{From: d.From, To: d.To, Until: at(d.Until)})
	}
	for _, e := range c.Exclude {
		r.Excludes = append(r.Excludes, regions.Exclude{Region: e.Region, Until: at(e.Until)})
	}
	return r
}
