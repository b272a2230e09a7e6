package load

import (
	"time"

	"github.com/spillway/spillway/registry"
)

// PLACEHOLDER (helper X, issue 13): Key and Load as fixed by
// /work/notes/mesh-design.md, so that load/exchange compiles before the
// load table moves here. Delete this file when the real load.Key and
// load.Load land (the duplicate declarations will fail the build until
// then, on purpose).

// Key names one flow: a service's load from one client zone to one
// upstream locality.
type Key struct {
	Service, ClientZone string
	Locality            registry.Locality
}

// Load is the measured traffic of one flow.
type Load struct {
	Key
	Issued, Succeeded, Errored                float64 // per second, fresh reporters
	InProgress                                uint64
	TotalIssued, TotalSucceeded, TotalErrored uint64
	Reporters                                 int
	Updated                                   time.Time
}
