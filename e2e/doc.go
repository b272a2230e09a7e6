// Package e2e holds cross-component end-to-end tests. They build the real
// binaries (spillway, spillwayctl), run them as subprocesses on loopback and
// talk to them with real clients; the web page's tests (ui_test.go) drive
// it in a headless Chromium (Debian's chromium, through chromedp).
package e2e
