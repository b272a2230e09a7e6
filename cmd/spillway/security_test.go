package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

func TestParseSecurityConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "spillway.yaml")
	if err := os.WriteFile(file, []byte("tokens_file: /etc/spillway/tokens.yaml\nauthz_file: /etc/spillway/authz.yaml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name              string
		args              []string
		wantTokens, wantZ string
	}{
		{"defaults", nil, "", ""},
		{"yaml", []string{"--config", file}, "/etc/spillway/tokens.yaml", "/etc/spillway/authz.yaml"},
		{"flags_beat_yaml", []string{"--config", file, "--tokens-file", "t.yaml", "--authz-file", "a.yaml"}, "t.yaml", "a.yaml"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.TokensFile != tt.wantTokens || c.AuthzFile != tt.wantZ {
				t.Errorf("tokens_file %q, authz_file %q; want %q, %q", c.TokensFile, c.AuthzFile, tt.wantTokens, tt.wantZ)
			}
		})
	}
}

// startSecured runs the server with args and returns its HTTP and gRPC
// addresses.
func startSecured(t *testing.T, args ...string) (httpAddr, grpcAddr string) {
	t.Helper()
	cfg, err := parseConfig(append([]string{"--data-dir", "", "--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &addrLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for httpAddr == "" {
		select {
		case err := <-done:
			t.Fatalf("run = %v before serving; logs:\n%s", err, logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not serving after 20s; logs:\n%s", logs)
		}
		httpAddr = logs.httpAddr()
		time.Sleep(time.Millisecond)
	}
	for _, f := range strings.Fields(logs.String()) {
		if v, ok := strings.CutPrefix(f, "grpc="); ok {
			grpcAddr = v
		}
	}
	return httpAddr, grpcAddr
}

func tokenLine(identity, token string) string {
	s := sha256.Sum256([]byte(token))
	return "- identity: " + identity + "\n  sha256: " + hex.EncodeToString(s[:]) + "\n"
}

// TestRunAuthentication: with --tokens-file and --admin-token-file, a
// known token is an identity, an unknown one is refused on both
// listeners, no token is anonymous, and the admin token (identity
// admin) changes the panic flag where the policy allows it.
func TestRunAuthentication(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	admin := filepath.Join(dir, "admin-token")
	authzFile := filepath.Join(dir, "authz.yaml")
	os.WriteFile(tokens, []byte(tokenLine("vm-payments", "tok-vm")), 0o600)
	os.WriteFile(admin, []byte("tok-admin\n"), 0o600)
	os.WriteFile(authzFile, []byte("identities:\n  - match: admin\n    allow: {panic: true}\ndefault: {read_registry: true}\n"), 0o600)
	httpAddr, grpcAddr := startSecured(t, "--tokens-file", tokens, "--admin-token-file", admin, "--authz-file", authzFile)

	httpTests := []struct {
		name, method, path, token, body string
		wantCode                        int
		wantBody                        string
	}{
		{"anonymous", "GET", "/v1/services", "", "", 200, ""},
		{"known_token", "GET", "/v1/services", "tok-vm", "", 200, ""},
		{"unknown_token", "GET", "/v1/services", "nope", "", 401, `{"error":"authorization: unknown token","field":"authorization","code":401}`},
		{"admin_token_panic", "POST", "/v1/panic", "tok-admin", `{"panic": true}`, 200, `"xds"`},
		{"vm_token_panic_refused_by_policy", "POST", "/v1/panic", "tok-vm", `{"panic": false}`, 403, `{"error":"permission denied: vm-payments may not panic","code":403}`},
	}
	for _, tt := range httpTests {
		t.Run("http_"+tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://"+httpAddr+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode || !strings.Contains(string(b), tt.wantBody) {
				t.Errorf("%s %s = %d %s, want %d with %s", tt.method, tt.path, resp.StatusCode, b, tt.wantCode, tt.wantBody)
			}
		})
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := registryv1.NewRegistryClient(conn)
	for _, tt := range []struct {
		name, token string
		want        codes.Code
	}{
		{"anonymous", "", codes.OK},
		{"known_token", "tok-vm", codes.OK},
		{"admin_token", "tok-admin", codes.OK},
		{"unknown_token", "nope", codes.Unauthenticated},
	} {
		t.Run("grpc_"+tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tt.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tt.token)
			}
			_, err := client.ListServices(ctx, &registryv1.ListServicesRequest{})
			if status.Code(err) != tt.want {
				t.Errorf("ListServices = %v, want %v", err, tt.want)
			}
			if tt.want == codes.Unauthenticated && status.Convert(err).Message() != "authorization: unknown token" {
				t.Errorf("message %q, want authorization: unknown token", status.Convert(err).Message())
			}
		})
	}
}

// TestRunBadSecurityFiles: a bad tokens or policy file fails the start,
// naming the flag, the file's line and the field.
func TestRunBadSecurityFiles(t *testing.T) {
	dir := t.TempDir()
	badTokens := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(badTokens, []byte("- identity: a\n  sha256: zz\n"), 0o600)
	badPolicy := filepath.Join(dir, "authz.yaml")
	os.WriteFile(badPolicy, []byte("identities:\n  - match: a\n    allow: {panic: [x]}\n"), 0o600)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"tokens", []string{"--tokens-file", badTokens}, "--tokens-file (tokens_file): " + badTokens + ":2: [0].sha256"},
		{"policy", []string{"--authz-file", badPolicy}, "--authz-file (authz_file): " + badPolicy + ":3: identities[0].allow.panic"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig(append([]string{"--data-dir", "", "--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tt.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = run(context.Background(), cfg, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run = %v, want an error with %q", err, tt.want)
			}
		})
	}
}
