package main

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/spillway/spillway/internal/admit"
	"github.com/spillway/spillway/internal/streamlimit"
	"github.com/spillway/spillway/xds"
)

// GRPCConfig tunes the gRPC server's transport: what each connection costs
// in memory, and how dead peers are found. Most connections are xDS
// clients that sit idle between pushes, so the defaults keep an idle
// connection cheap: its write buffer is taken from a shared pool only while
// it writes, and it has no read buffer (the HTTP/2 framer reads the socket
// itself).
type GRPCConfig struct {
	// SharedWriteBuffer returns a connection's write buffer to a pool after
	// each flush instead of keeping it for the connection's life (default
	// true).
	SharedWriteBuffer bool `yaml:"shared_write_buffer"`
	// WriteBufferSize is how much a connection batches before a write to
	// the socket (default 16 KiB, one HTTP/2 frame; grpc-go's is 32 KiB);
	// 0 writes every frame at once. While thousands of streams are pushed at once, the
	// shared pool holds about one buffer per connection being written.
	WriteBufferSize int `yaml:"write_buffer_size"`
	// ReadBufferSize is the most one read from the socket takes; 0 (the
	// default; grpc-go's is 32 KiB) has no buffer: the HTTP/2 framer reads
	// each frame's header and payload from the socket itself, two reads per
	// frame instead of one per burst. xDS clients send a few small
	// requests (ACKs) per push, so that costs little CPU, while every
	// buffer taken from grpc-go's read-buffer pool during a burst of
	// connections or requests stays in the pool until two GCs.
	ReadBufferSize int `yaml:"read_buffer_size"`
	// HeaderTableSize is the HPACK dynamic table the server lets each
	// client fill with the headers it sends (SETTINGS_HEADER_TABLE_SIZE);
	// default 0: a connection keeps no copy of its client's headers (about
	// 1 KiB per connection with grpc-go's 4096), and a client sends its
	// headers in full on each RPC, which for an xDS client is once per
	// stream (grpc-go: 4096).
	HeaderTableSize int `yaml:"header_table_size"`
	// InitialWindowSize and InitialConnWindowSize fix the HTTP/2 flow
	// control windows of a stream and of a connection; 0 keeps grpc-go's
	// 64 KiB start with dynamic (BDP) growth. Setting either turns the
	// dynamic growth off. At least 64 KiB when set.
	InitialWindowSize     int32 `yaml:"initial_window_size"`
	InitialConnWindowSize int32 `yaml:"initial_conn_window_size"`
	// KeepaliveTime is how long a connection may be silent before the
	// server pings it, and KeepaliveTimeout how long it waits for the ack
	// before closing it, so a client that vanished without a FIN does not
	// hold its streams forever (defaults 5m and 20s; grpc-go's xDS client
	// pings every 5m itself).
	KeepaliveTime    time.Duration `yaml:"keepalive_time"`
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// KeepaliveMinTime is the shortest ping interval a client may use,
	// with or without streams, before it is told too_many_pings (default
	// 5s).
	KeepaliveMinTime time.Duration `yaml:"keepalive_min_time"`
	// AdmitInSetup is the most new connections the server sets up at once
	// (TLS handshake, HTTP/2 transport, first RPC until its first answer);
	// the rest wait, accepted, in a queue of AdmitQueue. A reconnect storm
	// then peaks at the memory of AdmitInSetup setups instead of all of
	// them. 0 turns admission off.
	AdmitInSetup int `yaml:"admit_in_setup"`
	// AdmitQueue is the most accepted connections waiting for a place in
	// setup; one more is closed (its client reconnects).
	AdmitQueue int `yaml:"admit_queue"`
	// AdmitSetupTimeout is how long a connection may hold its place in
	// setup before its first answer, so clients that connect and say
	// nothing cannot stall the others for longer.
	AdmitSetupTimeout time.Duration `yaml:"admit_setup_timeout"`
	// MaxStreamsPerConn is the most streams one connection has open at
	// once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; default 1000, far
	// above a legitimate client: a grpc-go xDS client holds one ADS and
	// one LRS stream, Envoy one ADS stream, a VM agent one heartbeat
	// stream and a utilization stream per backend). A grpc-go client
	// queues streams beyond it until one ends; a client that ignores the
	// setting has them reset (REFUSED_STREAM). 0 is no limit (grpc-go's
	// default).
	MaxStreamsPerConn int `yaml:"max_streams_per_conn"`
	// MaxStreamsPerIdentity is the most streams one caller holds open
	// across all its connections (default 10,000): an authenticated
	// identity by name, an anonymous caller by its peer IP. One more is
	// refused with RESOURCE_EXHAUSTED naming this setting. 0 is no limit.
	MaxStreamsPerIdentity int `yaml:"max_streams_per_identity"`
}

func defaultGRPCConfig() GRPCConfig {
	return GRPCConfig{
		SharedWriteBuffer: true,
		WriteBufferSize:   16 << 10,
		ReadBufferSize:    0,
		HeaderTableSize:   0,
		KeepaliveTime:     5 * time.Minute,
		KeepaliveTimeout:  20 * time.Second,
		KeepaliveMinTime:  5 * time.Second,
		AdmitInSetup:      64,
		AdmitQueue:        65536,
		AdmitSetupTimeout: 500 * time.Millisecond,

		MaxStreamsPerConn:     1000,
		MaxStreamsPerIdentity: 10000,
	}
}

// validate names the flag (and YAML key) of the first bad value.
func (g *GRPCConfig) validate() error {
	const maxBuf = 16 << 20
	switch {
	case g.WriteBufferSize < 0 || g.WriteBufferSize > maxBuf:
		return fmt.Errorf("--grpc-write-buffer-size (grpc.write_buffer_size): %d, want 0..%d", g.WriteBufferSize, maxBuf)
	case g.ReadBufferSize < 0 || g.ReadBufferSize > maxBuf:
		return fmt.Errorf("--grpc-read-buffer-size (grpc.read_buffer_size): %d, want 0..%d", g.ReadBufferSize, maxBuf)
	case g.HeaderTableSize < 0 || g.HeaderTableSize > maxBuf:
		return fmt.Errorf("--grpc-header-table-size (grpc.header_table_size): %d, want 0..%d", g.HeaderTableSize, maxBuf)
	case g.InitialWindowSize != 0 && g.InitialWindowSize < 64<<10:
		return fmt.Errorf("--grpc-initial-window-size (grpc.initial_window_size): %d, want 0 (dynamic) or at least 65536", g.InitialWindowSize)
	case g.InitialConnWindowSize != 0 && g.InitialConnWindowSize < 64<<10:
		return fmt.Errorf("--grpc-initial-conn-window-size (grpc.initial_conn_window_size): %d, want 0 (dynamic) or at least 65536", g.InitialConnWindowSize)
	case g.KeepaliveTime < time.Second:
		return fmt.Errorf("--grpc-keepalive-time (grpc.keepalive_time): %v, want at least 1s", g.KeepaliveTime)
	case g.KeepaliveTimeout < time.Second:
		return fmt.Errorf("--grpc-keepalive-timeout (grpc.keepalive_timeout): %v, want at least 1s", g.KeepaliveTimeout)
	case g.KeepaliveMinTime <= 0:
		return fmt.Errorf("--grpc-keepalive-min-time (grpc.keepalive_min_time): %v, want > 0", g.KeepaliveMinTime)
	case g.AdmitInSetup < 0 || g.AdmitInSetup > 1<<20:
		return fmt.Errorf("--grpc-admit-in-setup (grpc.admit_in_setup): %d, want 0 (off)..%d", g.AdmitInSetup, 1<<20)
	case g.AdmitQueue < 1 || g.AdmitQueue > 1<<20:
		return fmt.Errorf("--grpc-admit-queue (grpc.admit_queue): %d, want 1..%d", g.AdmitQueue, 1<<20)
	case g.AdmitSetupTimeout <= 0:
		return fmt.Errorf("--grpc-admit-setup-timeout (grpc.admit_setup_timeout): %v, want > 0", g.AdmitSetupTimeout)
	case g.MaxStreamsPerConn < 0 || g.MaxStreamsPerConn > math.MaxInt32:
		return fmt.Errorf("--grpc-max-streams-per-conn (grpc.max_streams_per_conn): %d, want 0 (no limit)..%d", g.MaxStreamsPerConn, math.MaxInt32)
	case g.MaxStreamsPerIdentity < 0:
		return fmt.Errorf("--grpc-max-streams-per-identity (grpc.max_streams_per_identity): %d, want >= 0 (0: no limit)", g.MaxStreamsPerIdentity)
	}
	return nil
}

// admission wraps the gRPC listener in g's admission; its interceptors
// go in the server's options.
func (g GRPCConfig) admission(l net.Listener) (*admit.Listener, error) {
	return admit.NewListener(l, admit.Config{InSetup: g.AdmitInSetup, Queue: g.AdmitQueue, SetupTimeout: g.AdmitSetupTimeout})
}

// serverOptions are the grpc.NewServer options for g.
func (g GRPCConfig) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(xds.Codec()), // shared, pre-marshaled xDS responses
		grpc.SharedWriteBuffer(g.SharedWriteBuffer),
		grpc.WriteBufferSize(g.WriteBufferSize),
		grpc.ReadBufferSize(g.ReadBufferSize),
		grpc.HeaderTableSize(uint32(g.HeaderTableSize)),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: g.KeepaliveTime, Timeout: g.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: g.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.MaxConcurrentStreams(uint32(g.MaxStreamsPerConn)), // 0: no limit
	}
	if g.InitialWindowSize != 0 {
		opts = append(opts, grpc.InitialWindowSize(g.InitialWindowSize))
	}
	if g.InitialConnWindowSize != 0 {
		opts = append(opts, grpc.InitialConnWindowSize(g.InitialConnWindowSize))
	}
	return opts
}

// identityStreamLimit is the interceptor of
// --grpc-max-streams-per-identity, its metrics registered in reg and its
// warnings sent to log (or nil). It goes in the server's chain after
// authentication's interceptors, which set the identity it counts by;
// before them every caller would count as anonymous. Like
// prometheus.MustRegister, it panics if reg already holds its metrics.
func (g GRPCConfig) identityStreamLimit(reg prometheus.Registerer, log *slog.Logger) grpc.ServerOption {
	const setting = "--grpc-max-streams-per-identity"
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l, err := streamlimit.New(streamlimit.Config{PerIdentity: g.MaxStreamsPerIdentity, Setting: setting, Logger: log})
	if err == nil {
		err = l.Register(reg)
	}
	if err != nil {
		panic(fmt.Sprintf("%s: %v", setting, err)) // validate has checked the value
	}
	if g.MaxStreamsPerIdentity == 0 {
		log.Warn("no per-identity gRPC stream limit: one caller may hold any number of streams", "setting", setting)
	}
	return grpc.ChainStreamInterceptor(l.StreamServerInterceptor())
}

// clampInt32 keeps a flag's int in int32 range, so that validation sees an
// out-of-range value as too large (or too small) rather than wrapped.
func clampInt32(v int) int32 {
	return int32(min(max(v, math.MinInt32), math.MaxInt32))
}
