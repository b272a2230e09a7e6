package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/internal/testwait"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

const adsMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// rawStreams opens n ADS streams on one HTTP/2 connection to addr, as an
// attacker that ignores the server's SETTINGS_MAX_CONCURRENT_STREAMS
// would, and returns the limit the server announced and how many streams
// it reset with REFUSED_STREAM. A PING after the last HEADERS fences the
// count: the server answers frames in order, so every reset it sends for
// those streams comes before the PING's ack.
func rawStreams(t *testing.T, addr string, n int) (announced uint32, refused int) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.MaxHeaderListSize = 1 << 20
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: adsMethod},
		{Name: ":authority", Value: addr}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		enc.WriteField(f)
	}
	block := bytes.Clone(hb.Bytes()) // no dynamic table entries: every stream sends the same block
	// Writes run beside the reads: the server's answers could otherwise
	// fill both socket buffers and stall both sides.
	writeErr := make(chan error, 1)
	go func() {
		for i := range n {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndHeaders: true}); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- fr.WritePing(false, [8]byte{'f', 'e', 'n', 'c', 'e'})
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read after %d refused: %v", refused, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
					announced = v
				}
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("stream %d reset with %v, want REFUSED_STREAM", f.StreamID, f.ErrCode)
			}
			refused++
		case *http2.PingFrame:
			if f.IsAck() && f.Data == [8]byte{'f', 'e', 'n', 'c', 'e'} {
				if err := <-writeErr; err != nil {
					t.Fatal(err)
				}
				return announced, refused
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v after %d refused", f.ErrCode, refused)
		}
	}
}

// TestStreamsPerConnAttack is issue #28's finding: 15,000 ADS streams on
// one TCP connection were all accepted. The server now announces
// --grpc-max-streams-per-conn and resets every stream beyond it, so it
// holds at most that many on one connection however many a client opens.
func TestStreamsPerConnAttack(t *testing.T) {
	for _, tt := range []struct {
		name  string
		args  []string
		limit int
	}{
		{"default", nil, 1000},
		{"flag", []string{"--grpc-max-streams-per-conn", "16"}, 16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, grpcAddr := startSecured(t, tt.args...)
			const extra = 50
			announced, refused := rawStreams(t, grpcAddr, tt.limit+extra)
			if announced != uint32(tt.limit) {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want %d", announced, tt.limit)
			}
			if refused != extra {
				t.Errorf("server refused %d of %d streams on one connection, want %d: it holds %d open, want at most %d", refused, tt.limit+extra, extra, tt.limit+extra-refused, tt.limit)
			}
		})
	}
}

// adsStream opens an ADS stream on cc and waits for its first answer (the
// server has then counted it), returning it with its cancel.
func adsStream(ctx context.Context, cc *grpc.ClientConn, token string) (v3discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(ctx)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	ads, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err == nil {
		err = ads.Send(&v3discoverypb.DiscoveryRequest{
			Node:    &v3corepb.Node{Id: "limits", Locality: &v3corepb.Locality{Zone: "zone-a"}},
			TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", ResourceNames: []string{"payments"},
		})
		// A stream the server has already ended (a refusal can come
		// before the request is sent) gives io.EOF on Send; its status
		// comes from Recv, as grpc-go documents.
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if err == nil {
		_, err = ads.Recv()
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return ads, cancel, nil
}

func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestStreamsPerConnClient is what a grpc-go client sees at the
// per-connection limit: no error, its next stream waits until one of the
// connection's streams ends; another connection is not held up.
func TestStreamsPerConnClient(t *testing.T) {
	_, grpcAddr := startSecured(t, "--grpc-max-streams-per-conn", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := dialPlain(t, grpcAddr)
	if _, err := registryv1.NewRegistryClient(cc).Register(ctx, registration("10.7.0.1")); err != nil {
		t.Fatal(err)
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := range 3 {
		_, c, err := adsStream(ctx, cc, "")
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		cancels = append(cancels, c)
	}
	short, shortCancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err := adsStream(short, cc, "")
	shortCancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("4th stream on a connection with 3 of 3 = %v, want it to wait (DeadlineExceeded)", err)
	}
	if _, c, err := adsStream(ctx, dialPlain(t, grpcAddr), ""); err != nil {
		t.Fatalf("stream on another connection: %v", err)
	} else {
		cancels = append(cancels, c)
	}
	cancels[0]()
	if _, c, err := adsStream(ctx, cc, ""); err != nil {
		t.Fatalf("4th stream after one ended: %v", err)
	} else {
		cancels = append(cancels, c)
	}
}

func metricsBody(t *testing.T, httpAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStreamsPerIdentityAttack: one token identity opens streams over
// several connections; past --grpc-max-streams-per-identity the next is
// refused with RESOURCE_EXHAUSTED naming the limit and the flag, while
// another identity and anonymous callers are served; the refusal is
// counted, no metric names the identity, and a place freed is taken again.
func TestStreamsPerIdentityAttack(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(tokenLine("fleet-attacker", "tok-fleet")+tokenLine("checkout", "tok-checkout")), 0o600); err != nil {
		t.Fatal(err)
	}
	const limit = 3
	httpAddr, grpcAddr := startSecured(t, "--tokens-file", tokens, "--grpc-max-streams-per-identity", fmt.Sprint(limit))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := registryv1.NewRegistryClient(dialPlain(t, grpcAddr)).Register(ctx, registration("10.7.0.1")); err != nil {
		t.Fatal(err)
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := range limit {
		_, c, err := adsStream(ctx, dialPlain(t, grpcAddr), "tok-fleet") // a connection each
		if err != nil {
			t.Fatalf("fleet stream %d of %d: %v", i+1, limit, err)
		}
		cancels = append(cancels, c)
	}
	_, _, err := adsStream(ctx, dialPlain(t, grpcAddr), "tok-fleet")
	want := fmt.Sprintf("fleet-attacker already has %d gRPC streams open, the most one identity may (--grpc-max-streams-per-identity)", limit)
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), want) {
		t.Fatalf("stream %d of fleet-attacker = %v, want ResourceExhausted with %q", limit+1, err, want)
	}
	for _, token := range []string{"tok-checkout", ""} {
		_, c, err := adsStream(ctx, dialPlain(t, grpcAddr), token)
		if err != nil {
			t.Fatalf("stream with token %q beside the refused identity: %v", token, err)
		}
		cancels = append(cancels, c)
	}
	body := metricsBody(t, httpAddr)
	for _, want := range []string{
		`spillway_grpc_streams_refused_total{reason="identity"} 1`,
		"spillway_grpc_stream_identities 3", // fleet-attacker, checkout, anonymous 127.0.0.1
		fmt.Sprintf("spillway_grpc_streams_open %d", limit+2),
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q; stream metrics:\n%s", want, grepLines(body, "spillway_grpc_stream"))
		}
	}
	if strings.Contains(body, "fleet-attacker") {
		t.Errorf("an identity is in the metrics:\n%s", grepLines(body, "spillway_grpc"))
	}
	// One stream ends; once the server has counted it out, the identity
	// may open one again.
	cancels[0]()
	testwait.For(t, 10*time.Second, "an ended stream counted out", func() (bool, string) {
		l := grepLines(metricsBody(t, httpAddr), "spillway_grpc_streams_open")
		return l == fmt.Sprintf("spillway_grpc_streams_open %d", limit+1), l
	})
	if _, c, err := adsStream(ctx, dialPlain(t, grpcAddr), "tok-fleet"); err != nil {
		t.Fatalf("fleet stream after one ended: %v", err)
	} else {
		cancels = append(cancels, c)
	}
}

// TestStreamLimitsYAML: both limits have config file keys under grpc.
func TestStreamLimitsYAML(t *testing.T) {
	file := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(file, []byte("grpc:\n  max_streams_per_conn: 64\n  max_streams_per_identity: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"--config", file}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPC.MaxStreamsPerConn != 64 || c.GRPC.MaxStreamsPerIdentity != 0 {
		t.Errorf("limits from YAML = %d per connection, %d per identity; want 64 and 0", c.GRPC.MaxStreamsPerConn, c.GRPC.MaxStreamsPerIdentity)
	}
}
