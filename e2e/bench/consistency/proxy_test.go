package main

import (
	"io"
	"net"
	"testing"
	"time"
)

// echo serves TCP on 127.0.0.1, writing back what it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes b and reads it back within d; it reports what came back
// and the read error.
func roundTrip(c net.Conn, b string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(b)); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(b))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

func TestProxyCut(t *testing.T) {
	p, err := newProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	before := dial()
	if got, err := roundTrip(before, "hello", 2*time.Second); got != "hello" {
		t.Fatalf("before the cut: echoed %q (%v), want hello", got, err)
	}
	if n := p.Cut(); n != 2 {
		t.Errorf("Cut held %d connections, want 2 (both sides of one)", n)
	}
	// Silent, not closed: the read times out.
	if got, err := roundTrip(before, "lost", 300*time.Millisecond); got != "" || !isTimeout(err) {
		t.Errorf("during the cut: echoed %q (%v), want nothing and a timeout", got, err)
	}
	during := dial() // accepted, and held
	if got, err := roundTrip(during, "held", 300*time.Millisecond); got != "" || !isTimeout(err) {
		t.Errorf("new connection during the cut: echoed %q (%v), want nothing and a timeout", got, err)
	}
	if n := p.Restore(); n != 3 {
		t.Errorf("Restore closed %d connections, want 3", n)
	}
	for name, c := range map[string]net.Conn{"before": before, "during": during} {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("connection opened %s the cut after Restore: read error %v, want it closed", name, err)
		}
	}
	after := dial()
	if got, err := roundTrip(after, "again", 2*time.Second); got != "again" {
		t.Errorf("after Restore: echoed %q (%v), want again", got, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
