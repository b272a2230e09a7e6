// Package e2e holds cross-component end-to-end tests. They build the real
// binaries (spillway, spillwayctl), run them as subprocesses on loopback and
// talk to them with real clients.
package e2e
