package migration

import "github.com/spillway/spillway/migration/rollout"

// The rollout config and its matching live in the leaf package rollout,
// which the client library imports too; these names are kept so that the
// server's code reads migration.Config.

// ErrInvalid is wrapped by every config error (rollout.ErrInvalid).
var ErrInvalid = rollout.ErrInvalid

// Rule is one rollout rule (rollout.Rule).
type Rule = rollout.Rule

// Config is a rollout config: ordered rules (rollout.Config).
type Config = rollout.Config

// Decision is the outcome of Config.Eligible (rollout.Decision).
type Decision = rollout.Decision

// Limits of a config.
const (
	MaxRules     = rollout.MaxRules
	MaxMatchKeys = rollout.MaxMatchKeys
)

// Parse reads a YAML rollout config strictly (rollout.Parse).
func Parse(b []byte) (*Config, error) { return rollout.Parse(b) }

// Bucket places a service in [0, 10000) (rollout.Bucket).
func Bucket(service string) int { return rollout.Bucket(service) }
