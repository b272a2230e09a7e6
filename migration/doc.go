// Package migration will hold the DNS-to-xDS rollout config, eligibility,
// the panic flag and weight blending. It is empty until the migration issue
// lands.
package migration
