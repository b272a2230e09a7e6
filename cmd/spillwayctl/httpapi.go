package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/clientlib/clientcreds"
	"github.com/spillway/spillway/internal/serverinfo"
)

// httpFlag defines --http, the HTTP address of the commands that call the
// HTTP API (config, route, audit). Its default, "", asks --server.
func httpFlag(fs *flag.FlagSet, api string) *string {
	return fs.String("http", "", "HTTP `address` of the spillway server, for the "+api+" API (default: asked of --server; needed only with a server older than this spillwayctl)")
}

// httpAPI is where an HTTP call goes and how.
type httpAPI struct {
	base  string // scheme://host:port
	creds clientcreds.Config
	// hint is for a call that finds no server there: where the address
	// came from.
	hint string
}

// httpAPI returns where to send an HTTP call with token (as for
// e.withToken). addr is --http: given, it is used as always (https with
// --tls-ca). "" asks --server over gRPC (serverinfo), with the same
// credentials as the HTTP call: see serverinfo.Info.HTTPAddrFor for how
// a wildcard or loopback address becomes one to dial; it is https when
// the server says its HTTP port speaks TLS or when TLS is on here, so a
// token never goes out in plaintext that --tls-ca meant to protect.
func (e *env) httpAPI(ctx context.Context, addr, token string) (httpAPI, error) {
	creds := e.withToken(token)
	if addr != "" {
		return httpAPI{base: creds.Scheme() + "://" + addr, creds: creds, hint: "is spillway's HTTP port at --http " + addr + "?"}, nil
	}
	conn, err := e.dialToken(token)
	if err != nil {
		return httpAPI{}, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	info, err := serverinfo.Lookup(ctx, conn)
	switch {
	case errors.Is(err, serverinfo.ErrNotServed):
		return httpAPI{}, fmt.Errorf("--server %s does not say where its HTTP API is (a spillway older than this spillwayctl): pass --http ADDR, the server's --http-addr (e.g. --http %s)", e.server, defaultHTTP)
	case status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied:
		// The HTTP API would refuse these credentials too.
		return httpAPI{}, fmt.Errorf("ask --server for its HTTP address: %s", describe(err, e))
	case err != nil:
		return httpAPI{}, fmt.Errorf("ask --server for its HTTP address: %s; or pass --http ADDR", describe(err, e))
	}
	hostport, err := info.HTTPAddrFor(e.server)
	if err != nil {
		return httpAPI{}, fmt.Errorf("--server %s: %v: pass --http ADDR", e.server, err)
	}
	if info.TLS {
		creds.TLS = true
	}
	if creds.TLSOn() && creds.ServerName == "" {
		// The HTTP port has the gRPC port's certificate: check it for
		// the name --server was checked for, whatever host it is on.
		if host, err := serverinfo.TargetHost(e.server); err == nil && host != "" {
			creds.ServerName = host
		}
	}
	hint := fmt.Sprintf("--server %s says its HTTP port is %s, dialled as %s; pass --http ADDR for another address", e.server, info.HTTPAddr, hostport)
	return httpAPI{base: creds.Scheme() + "://" + hostport, creds: creds, hint: hint}, nil
}
