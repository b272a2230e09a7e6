package main

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// proxy forwards TCP connections from a 127.0.0.1 listener to target. Cut
// makes it drop traffic: every connection stays open but nothing more is
// read from it or written to it (bytes already read are discarded), and
// new connections are accepted and held the same way, so the peers see a
// silent network, not a closed one. Restore closes every connection the
// cut held and forwards new ones again.
type proxy struct {
	// Read-only after newProxy.
	ln     net.Listener
	target string

	mu    sync.Mutex // guards cut and conns
	cut   bool
	conns map[net.Conn]struct{} // both sides of every open connection

	wg sync.WaitGroup // the accept loop and the pumps
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // Close
		}
		p.mu.Lock()
		cut := p.cut
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		if cut {
			continue // held: never read, closed by Restore
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			p.drop(c)
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling: hold both
			p.conns[up] = struct{}{}
			p.mu.Unlock()
			continue
		}
		p.conns[up] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pump(up, c) })
		p.wg.Go(func() { p.pump(c, up) })
	}
}

func (p *proxy) cutNow() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// pump copies src to dst until either fails. While cut it neither reads
// nor writes; it polls for the cut's end every 50 ms, by which time
// Restore has closed both sides.
func (p *proxy) pump(dst, src net.Conn) {
	defer p.drop(src)
	defer p.drop(dst)
	buf := make([]byte, 32<<10)
	for {
		if p.cutNow() {
			time.Sleep(50 * time.Millisecond)
			if !p.open(src) {
				return
			}
			continue
		}
		src.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := src.Read(buf)
		if n > 0 && !p.cutNow() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return
		}
	}
}

func (p *proxy) open(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.conns[c]
	return ok
}

func (p *proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// Cut starts dropping traffic and returns how many connections it holds.
func (p *proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	return len(p.conns)
}

// Restore closes every connection open during the cut and forwards again;
// it returns how many it closed.
func (p *proxy) Restore() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.cut = false
	return n
}

// Close stops accepting, closes every connection and waits for the pumps.
func (p *proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
