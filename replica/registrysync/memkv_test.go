package registrysync

import (
	"context"
	"sync"
)

// oneElector grants the election to the replica whose id is holder, and
// takes it away when holder changes.
type oneElector struct {
	mu     sync.Mutex
	holder string
	lost   chan struct{}
	change chan struct{}
}

func newOneElector(holder string) *oneElector {
	return &oneElector{holder: holder, lost: make(chan struct{}), change: make(chan struct{})}
}

func (e *oneElector) set(holder string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.holder = holder
	close(e.lost)
	e.lost = make(chan struct{})
	close(e.change)
	e.change = make(chan struct{})
}

func (e *oneElector) Campaign(ctx context.Context, id string) (<-chan struct{}, func(), error) {
	for {
		e.mu.Lock()
		holder, lost, change := e.holder, e.lost, e.change
		e.mu.Unlock()
		if holder == id {
			return lost, func() {}, nil
		}
		select {
		case <-change:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}
