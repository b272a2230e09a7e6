package rollout

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"slices"

	"gopkg.in/yaml.v3"
)

// ErrInvalid is wrapped by every config error.
var ErrInvalid = errors.New("invalid rollout config")

// Rule is one rollout rule.
type Rule struct {
	Name    string            `yaml:"name" json:"name,omitempty"`
	Match   map[string]string `yaml:"match" json:"match,omitempty"`
	Percent float64           `yaml:"percent" json:"percent"`
}

// Config is a rollout config: ordered rules.
type Config struct {
	Rules []Rule `yaml:"rules" json:"rules"`
}

// Limits of a config.
const (
	MaxRules     = 1000
	MaxMatchKeys = 16
	buckets      = 10000
)

// Parse reads a YAML rollout config strictly: unknown fields, bad
// percentages and empty keys are errors that name the field.
func Parse(b []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document (write \"rules: []\" for no rules)", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document", ErrInvalid)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks every rule; the error names the first bad field, e.g.
// "rules[2].percent: 150 is not in 0..100".
func (c *Config) Validate() error {
	if len(c.Rules) > MaxRules {
		return fmt.Errorf("%w: rules: %d rules, at most %d", ErrInvalid, len(c.Rules), MaxRules)
	}
	for i, r := range c.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		if r.Percent < 0 || r.Percent > 100 || r.Percent != r.Percent {
			return fmt.Errorf("%w: %s.percent: %v is not in 0..100", ErrInvalid, f, r.Percent)
		}
		if len(r.Match) > MaxMatchKeys {
			return fmt.Errorf("%w: %s.match: %d keys, at most %d", ErrInvalid, f, len(r.Match), MaxMatchKeys)
		}
		for _, k := range slices.Sorted(maps.Keys(r.Match)) {
			if k == "" || len(k) > 63 {
				return fmt.Errorf("%w: %s.match: key %q must be 1..63 characters", ErrInvalid, f, k)
			}
		}
		if len(r.Name) > 63 {
			return fmt.Errorf("%w: %s.name: %d characters, at most 63", ErrInvalid, f, len(r.Name))
		}
	}
	return nil
}

// Bucket places a service in [0, 10000): the same name, the same bucket,
// on every machine and every run.
func Bucket(service string) int {
	h := fnv.New64a()
	h.Write([]byte("spillway-rollout:"))
	h.Write([]byte(service))
	return int(h.Sum64() % buckets)
}

// Decision is the outcome of Eligible.
type Decision struct {
	Eligible bool
	// Rule is the index of the deciding rule, -1 if none matched.
	Rule     int
	RuleName string
	Bucket   int
}

// Eligible decides whether the service with metadata meta (which must
// include "service") may use xDS under c. A nil config makes nobody
// eligible.
func (c *Config) Eligible(meta map[string]string) Decision {
	d := Decision{Rule: -1, Bucket: Bucket(meta["service"])}
	if c == nil {
		return d
	}
	for i, r := range c.Rules {
		if !matches(r.Match, meta) {
			continue
		}
		d.Rule, d.RuleName = i, r.Name
		d.Eligible = float64(d.Bucket) < r.Percent*buckets/100
		return d
	}
	return d
}

func matches(match, meta map[string]string) bool {
	for k, v := range match {
		if meta[k] != v {
			return false
		}
	}
	return true
}
