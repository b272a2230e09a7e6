package main

import (
	"errors"
	"io"
	"net/http"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
)

// The child processes are package benchproc's (shared with
// e2e/bench/consistency).
type proc = benchproc.Proc

var (
	startProc = benchproc.Start
	freeAddr  = benchproc.FreeAddr
	scrape    = benchproc.Scrape
)

// forceGC asks a spillway started with --pprof to run a GC: the heap
// profile handler with gc=1 calls runtime.GC before writing the profile.
func forceGC(httpAddr string) error {
	resp, err := http.Get("http://" + httpAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New("GET /debug/pprof/heap?gc=1: " + resp.Status)
	}
	return nil
}
