package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
)

// viewFunc is a View and Sharer a test switches.
type viewFunc struct{ complete, sharing error }

func (v *viewFunc) Complete() error { return v.complete }
func (v *viewFunc) Sharing() error  { return v.sharing }

// TestHeartbeatUnknownWhileViewIncomplete: a heartbeat for a lease this
// replica does not hold is NotFound (register again) only while its view
// of the store is complete; while it is not (a relist after a broken
// watch, the store out of reach) it is ErrNotShared, UNAVAILABLE at the
// API, so that the agent moves on with its lease instead of registering
// again. A known lease is renewed either way.
func TestHeartbeatUnknownWhileViewIncomplete(t *testing.T) {
	v := &viewFunc{}
	f := newFixture(t, Config{View: v, Sharer: v})
	ids := f.register(t, 1, 10*time.Second)
	if _, err := f.m.Heartbeat("0123456789abcdef"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown lease, complete view: %v, want ErrNotFound", err)
	}
	v.complete = errors.New("store etcd://x: listing the registrations again after a broken watch")
	_, err := f.m.Heartbeat("0123456789abcdef")
	if !errors.Is(err, ErrNotShared) || !errors.Is(err, systemstore.ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Errorf("unknown lease, incomplete view: %v, want ErrNotShared (unavailable), not ErrNotFound", err)
	}
	if _, err := f.m.Heartbeat(ids[0]); err != nil {
		t.Errorf("known lease, incomplete view: %v, want renewed", err)
	}
}
