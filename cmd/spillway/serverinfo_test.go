package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/internal/serverinfo"
)

// TestServerInfoNamesHTTP: the gRPC port says where the HTTP API listens
// (the bound address, not the flag's :0), so spillwayctl needs only
// --server.
func TestServerInfoNamesHTTP(t *testing.T) {
	httpAddr, grpcAddr := startSecured(t)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := serverinfo.Lookup(ctx, conn)
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if info.HTTPAddr != httpAddr || info.TLS {
		t.Errorf("info = %+v, want HTTP %s without TLS", info, httpAddr)
	}
}
