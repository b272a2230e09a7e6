package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

func TestGRPCConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults", args: nil},
		{name: "no_write_buffer", args: []string{"--grpc-write-buffer-size", "0"}},
		{name: "fixed_windows", args: []string{"--grpc-initial-window-size", "1048576", "--grpc-initial-conn-window-size", "4194304"}},
		{name: "negative_write_buffer", args: []string{"--grpc-write-buffer-size", "-1"}, wantErr: "--grpc-write-buffer-size (grpc.write_buffer_size)"},
		{name: "header_table_4096", args: []string{"--grpc-header-table-size", "4096"}},
		{name: "negative_header_table", args: []string{"--grpc-header-table-size", "-1"}, wantErr: "--grpc-header-table-size (grpc.header_table_size)"},
		{name: "huge_read_buffer", args: []string{"--grpc-read-buffer-size", "1000000000"}, wantErr: "--grpc-read-buffer-size (grpc.read_buffer_size)"},
		{name: "small_window", args: []string{"--grpc-initial-window-size", "1024"}, wantErr: "--grpc-initial-window-size (grpc.initial_window_size)"},
		{name: "window_overflow", args: []string{"--grpc-initial-conn-window-size", "-5"}, wantErr: "--grpc-initial-conn-window-size (grpc.initial_conn_window_size)"},
		{name: "short_keepalive", args: []string{"--grpc-keepalive-time", "10ms"}, wantErr: "--grpc-keepalive-time (grpc.keepalive_time)"},
		{name: "short_keepalive_timeout", args: []string{"--grpc-keepalive-timeout", "0s"}, wantErr: "--grpc-keepalive-timeout (grpc.keepalive_timeout)"},
		{name: "zero_min_time", args: []string{"--grpc-keepalive-min-time", "0s"}, wantErr: "--grpc-keepalive-min-time (grpc.keepalive_min_time)"},
		{name: "admission_off", args: []string{"--grpc-admit-in-setup", "0"}},
		{name: "negative_admission", args: []string{"--grpc-admit-in-setup", "-1"}, wantErr: "--grpc-admit-in-setup (grpc.admit_in_setup)"},
		{name: "zero_admission_queue", args: []string{"--grpc-admit-queue", "0"}, wantErr: "--grpc-admit-queue (grpc.admit_queue)"},
		{name: "zero_setup_timeout", args: []string{"--grpc-admit-setup-timeout", "0s"}, wantErr: "--grpc-admit-setup-timeout (grpc.admit_setup_timeout)"},
		{name: "streams_per_conn_unlimited", args: []string{"--grpc-max-streams-per-conn", "0"}},
		{name: "negative_streams_per_conn", args: []string{"--grpc-max-streams-per-conn", "-1"}, wantErr: "--grpc-max-streams-per-conn (grpc.max_streams_per_conn)"},
		{name: "huge_streams_per_conn", args: []string{"--grpc-max-streams-per-conn", "4294967296"}, wantErr: "--grpc-max-streams-per-conn (grpc.max_streams_per_conn)"},
		{name: "streams_per_identity_unlimited", args: []string{"--grpc-max-streams-per-identity", "0"}},
		{name: "negative_streams_per_identity", args: []string{"--grpc-max-streams-per-identity", "-1"}, wantErr: "--grpc-max-streams-per-identity (grpc.max_streams_per_identity)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig(tt.args, nil)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("parseConfig(%q) = %v, want no error", tt.args, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("parseConfig(%q) = %v, want an error naming %q", tt.args, err, tt.wantErr)
			}
		})
	}
}

func TestGRPCConfigDefaultsAndFlags(t *testing.T) {
	c, err := parseConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.GRPC, defaultGRPCConfig(); got != want {
		t.Errorf("GRPC = %+v, want %+v", got, want)
	}
	if !c.GRPC.SharedWriteBuffer || c.GRPC.WriteBufferSize != 16<<10 || c.GRPC.ReadBufferSize != 0 || c.Pprof {
		t.Errorf("defaults = %+v, pprof %v; want a shared 16 KiB write buffer, no read buffer and no pprof", c.GRPC, c.Pprof)
	}
	if c.GRPC.MaxStreamsPerConn != 1000 || c.GRPC.MaxStreamsPerIdentity != 10000 {
		t.Errorf("stream limits = %d per connection, %d per identity; want 1000 and 10000 (a default start bounds streams)", c.GRPC.MaxStreamsPerConn, c.GRPC.MaxStreamsPerIdentity)
	}
	c, err = parseConfig([]string{"--grpc-shared-write-buffer=false", "--grpc-initial-window-size", "131072", "--pprof"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPC.SharedWriteBuffer || c.GRPC.InitialWindowSize != 131072 || !c.Pprof {
		t.Errorf("flags gave %+v, pprof %v", c.GRPC, c.Pprof)
	}
}

// TestHeaderTableSetting: the server tells each client, in its first
// SETTINGS frame, the HPACK table size of --grpc-header-table-size (0 by
// default: the connection keeps no copy of the client's headers).
func TestHeaderTableSetting(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want uint32
	}{
		{"default", nil, 0},
		{"flag", []string{"--grpc-header-table-size", "4096"}, 4096},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(c.GRPC.serverOptions()...)
			var wg sync.WaitGroup
			wg.Go(func() { srv.Serve(lis) })
			defer func() { srv.Stop(); wg.Wait() }()
			conn, err := net.DialTimeout("tcp", lis.Addr().String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(conn, conn)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			sf, ok := f.(*http2.SettingsFrame)
			if !ok {
				t.Fatalf("first frame = %T, want the server's SETTINGS", f)
			}
			got, ok := sf.Value(http2.SettingHeaderTableSize)
			if !ok || got != tt.want {
				t.Errorf("SETTINGS_HEADER_TABLE_SIZE = %d (present %v), want %d", got, ok, tt.want)
			}
		})
	}
}

// BenchmarkLargeEDSPush measures the trade-off of the transport defaults:
// one ClusterLoadAssignment of a 10,000-endpoint service (about 1 MB) sent
// to a fresh stream, with grpc-go's defaults and with spillway's.
func BenchmarkLargeEDSPush(b *testing.B) {
	const endpoints = 10000
	grpcDefaults := GRPCConfig{WriteBufferSize: 32 << 10, ReadBufferSize: 32 << 10,
		KeepaliveTime: 2 * time.Hour, KeepaliveTimeout: 20 * time.Second, KeepaliveMinTime: 5 * time.Minute}
	for _, c := range []struct {
		name string
		cfg  GRPCConfig
	}{
		{"grpc-go_defaults", grpcDefaults},
		{"spillway_defaults", defaultGRPCConfig()},
		{"read_buffer_4KiB", withReadBuffer(defaultGRPCConfig(), 4<<10)},
		{"shared_32KiB", GRPCConfig{SharedWriteBuffer: true, WriteBufferSize: 32 << 10, ReadBufferSize: 4 << 10,
			KeepaliveTime: time.Hour, KeepaliveTimeout: time.Minute, KeepaliveMinTime: time.Second}},
		{"shared_16KiB", GRPCConfig{SharedWriteBuffer: true, WriteBufferSize: 16 << 10, ReadBufferSize: 4 << 10,
			KeepaliveTime: time.Hour, KeepaliveTimeout: time.Minute, KeepaliveMinTime: time.Second}},
		{"shared_4KiB", GRPCConfig{SharedWriteBuffer: true, WriteBufferSize: 4 << 10, ReadBufferSize: 4 << 10,
			KeepaliveTime: time.Hour, KeepaliveTimeout: time.Minute, KeepaliveMinTime: time.Second}},
		{"write_buffer_16KiB", withWriteBuffer(defaultGRPCConfig(), 16<<10)},
		{"write_buffer_0", withWriteBuffer(defaultGRPCConfig(), 0)},
	} {
		b.Run(c.name, func(b *testing.B) {
			client := startBenchXDS(b, c.cfg, endpoints)
			b.ReportAllocs()
			var size int
			for b.Loop() {
				size = fetchEDS(b, client, endpoints)
			}
			b.SetBytes(int64(size))
		})
	}
}

// BenchmarkLargeEDSFanout is the trade-off of the transport defaults on a
// fan-out: a 5,000-endpoint ClusterLoadAssignment sent to 100 streams, each
// on its own connection (as grpc-go clients open them), all asking at
// once; one op is the time until every stream holds it.
func BenchmarkLargeEDSFanout(b *testing.B) {
	const endpoints, streams = 5000, 100
	for _, c := range []struct {
		name string
		cfg  GRPCConfig
	}{
		{"spillway_defaults", defaultGRPCConfig()},
		{"read_buffer_4KiB", withReadBuffer(defaultGRPCConfig(), 4<<10)},
		{"write_buffer_16KiB", withWriteBuffer(defaultGRPCConfig(), 16<<10)},
		{"write_buffer_8KiB", withWriteBuffer(defaultGRPCConfig(), 8<<10)},
		{"write_buffer_4KiB", withWriteBuffer(defaultGRPCConfig(), 4<<10)},
		{"write_buffer_0", withWriteBuffer(defaultGRPCConfig(), 0)},
	} {
		b.Run(c.name, func(b *testing.B) {
			addr := serveBenchXDS(b, c.cfg, endpoints)
			clients := make([]v3discoverygrpc.AggregatedDiscoveryServiceClient, streams)
			for i := range clients {
				clients[i] = dialBenchXDS(b, addr)
			}
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make([]error, streams)
				for i, client := range clients {
					wg.Go(func() { _, errs[i] = fetchEDSErr(client, endpoints) })
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func withReadBuffer(c GRPCConfig, n int) GRPCConfig {
	c.ReadBufferSize = n
	return c
}

func withWriteBuffer(c GRPCConfig, n int) GRPCConfig {
	c.WriteBufferSize = n
	return c
}

// startBenchXDS serves an xDS server over loopback with cfg's transport
// options and a store holding service "big" of n endpoints.
func startBenchXDS(b *testing.B, cfg GRPCConfig, n int) v3discoverygrpc.AggregatedDiscoveryServiceClient {
	return dialBenchXDS(b, serveBenchXDS(b, cfg, n))
}

// serveBenchXDS is startBenchXDS's server; it returns its address.
func serveBenchXDS(b *testing.B, cfg GRPCConfig, n int) string {
	store := registry.NewStore()
	ops := make([]registry.Op, 0, n)
	for i := range n {
		ops = append(ops, registry.Upsert("big", &registry.Endpoint{
			ID:       fmt.Sprintf("ep-%d", i),
			Address:  netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: fmt.Sprintf("zone-%d", i%3)},
			Health:   registry.Healthy, Source: registry.SourceStatic,
		}))
	}
	if _, err := store.Apply(ops...); err != nil {
		b.Fatal(err)
	}
	store.MarkSynced()
	x, err := xds.New(xds.Config{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(cfg.serverOptions()...)
	x.Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	wg.Go(func() { x.Run(ctx) })
	b.Cleanup(func() {
		cancel()
		srv.Stop()
		wg.Wait()
	})
	return lis.Addr().String()
}

// dialBenchXDS opens a client connection of its own to addr.
func dialBenchXDS(b *testing.B, addr string) v3discoverygrpc.AggregatedDiscoveryServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
}

// fetchEDS opens a stream, asks for "big"'s endpoints and returns the
// response's size once it holds all n.
func fetchEDS(b *testing.B, client v3discoverygrpc.AggregatedDiscoveryServiceClient, n int) int {
	size, err := fetchEDSErr(client, n)
	if err != nil {
		b.Fatal(err)
	}
	return size
}

// fetchEDSErr is fetchEDS for any goroutine.
func fetchEDSErr(client v3discoverygrpc.AggregatedDiscoveryServiceClient, n int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	if err := stream.Send(&v3discoverypb.DiscoveryRequest{
		Node:    &v3corepb.Node{Id: "bench", Locality: &v3corepb.Locality{Region: "r1", Zone: "zone-0"}},
		TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", ResourceNames: []string{"big"},
	}); err != nil {
		return 0, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	if len(resp.GetResources()) != 1 {
		return 0, fmt.Errorf("EDS response holds %d resources, want 1", len(resp.GetResources()))
	}
	size := proto.Size(resp)
	if size < n*20 {
		return 0, fmt.Errorf("EDS response is %d bytes, want at least %d for %d endpoints", size, n*20, n)
	}
	return size, nil
}
