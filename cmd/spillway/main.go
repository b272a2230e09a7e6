// Command spillway is the service discovery server: the registry, its VM
// heartbeat API, and (as they land) DNS and xDS, in one process.
//
//	go run ./cmd/spillway                     # defaults, nothing else needed
//	spillway --config spillway.yaml --data-dir /var/lib/spillway
//	go run ./cmd/spillway demo                # a server with synthetic backends and clients, and its page
//	spillway store copy --from bbolt:///var/lib/spillway --to etcd://e1:2379/spillway
//
// Run with --help for every flag. SIGTERM or SIGINT shuts down gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "store" { // spillway store copy --from ... --to ...
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		code := storeMain(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "demo" { // spillway demo [--scenario NAME]; spillway demo event NAME
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		code := demoMain(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "spillway: %v\n", err)
		os.Exit(2)
	}
	log := cfg.logger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("spillway stopped", "err", err)
		os.Exit(1)
	}
}
