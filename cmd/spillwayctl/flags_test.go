package main

import (
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

func TestParsePort(t *testing.T) {
	tests := []struct {
		in      string
		want    *registryv1.Port
		wantErr string // substring; "" means success
	}{
		{"grpc=8080", &registryv1.Port{Name: "grpc", Number: 8080, Protocol: "tcp"}, ""},
		{"dns=53/udp", &registryv1.Port{Name: "dns", Number: 53, Protocol: "udp"}, ""},
		{"dns=53/UDP", &registryv1.Port{Name: "dns", Number: 53, Protocol: "udp"}, ""},
		{"http=80/tcp", &registryv1.Port{Name: "http", Number: 80, Protocol: "tcp"}, ""},
		{"max=65535", &registryv1.Port{Name: "max", Number: 65535, Protocol: "tcp"}, ""},
		{"min=1", &registryv1.Port{Name: "min", Number: 1, Protocol: "tcp"}, ""},
		{"grpc=0", nil, "out of range"},
		{"grpc=65536", nil, "out of range"},
		{"grpc=99999999999999999999999", nil, "out of range"},
		{"grpc=-1", nil, "not a number"},
		{"grpc=+80", nil, "not a number"},
		{"grpc=http", nil, "not a number"},
		{"8080", nil, "want NAME=PORT[/PROTO]"},
		{"", nil, "want NAME=PORT[/PROTO]"},
		{"=8080", nil, "name before '=' is empty"},
		{"grpc=", nil, "number after '=' is empty"},
		{"grpc=/tcp", nil, "number after '=' is empty"},
		{"grpc=8080/sctp", nil, `protocol "sctp"`},
		{"grpc=8080/", nil, `protocol ""`},
		{"grpc=8080/tcp/udp", nil, `protocol "tcp/udp"`},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := parsePort(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("parsePort(%q) = %v, want an error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--port") {
					t.Fatalf("parsePort(%q) = %q, want it to name --port and contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parsePort(%q) = %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("parsePort(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func FuzzParsePort(f *testing.F) {
	for _, s := range []string{"grpc=8080", "dns=53/udp", "http=80/TCP", "grpc=0", "grpc=65536", "8080", "=1", "a=1/", "a==1", "a=1/tcp/udp", "é=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePort(s)
		if err != nil {
			if !strings.Contains(err.Error(), "--port") {
				t.Fatalf("parsePort(%q) = %q, want the error to name --port", s, err)
			}
			return
		}
		if p.GetName() == "" || strings.Contains(p.GetName(), "=") {
			t.Fatalf("parsePort(%q) name = %q", s, p.GetName())
		}
		if p.GetNumber() < 1 || p.GetNumber() > 65535 {
			t.Fatalf("parsePort(%q) number = %d, want 1..65535", s, p.GetNumber())
		}
		if p.GetProtocol() != "tcp" && p.GetProtocol() != "udp" {
			t.Fatalf("parsePort(%q) protocol = %q", s, p.GetProtocol())
		}
		// What the endpoints table prints parses back to the same port.
		again, err := parsePort(formatPorts([]*registryv1.Port{p}))
		if err != nil {
			t.Fatalf("parsePort(formatPorts(parsePort(%q))) = %v", s, err)
		}
		if diff := cmp.Diff(p, again, protocmp.Transform()); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", s, diff)
		}
	})
}

func TestParseMeta(t *testing.T) {
	tests := []struct {
		in, key, value string
		wantErr        string
	}{
		{"version=1.2.3", "version", "1.2.3", ""},
		{"k=", "k", "", ""},
		{"query=a=b", "query", "a=b", ""},
		{"team/owner=sre", "team/owner", "sre", ""},
		{"version", "", "", "want KEY=VALUE"},
		{"", "", "", "want KEY=VALUE"},
		{"=v", "", "", "key before '=' is empty"},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			k, v, err := parseMeta(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--meta") {
					t.Fatalf("parseMeta(%q) = %v, want an error naming --meta and containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || k != tt.key || v != tt.value {
				t.Fatalf("parseMeta(%q) = %q, %q, %v, want %q, %q, nil", tt.in, k, v, err, tt.key, tt.value)
			}
		})
	}
}

func TestParseWeight(t *testing.T) {
	for in, want := range map[string]uint32{"1": 1, "100": 100, "65535": 65535} {
		if got, err := parseWeight(in); err != nil || got != want {
			t.Errorf("parseWeight(%q) = %d, %v, want %d, nil", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "65536", "-1", "x", "", "1.5", "4294967297"} {
		if _, err := parseWeight(in); err == nil || !strings.Contains(err.Error(), "--weight") {
			t.Errorf("parseWeight(%q) = %v, want an error naming --weight", in, err)
		}
	}
}

func TestTTLSeconds(t *testing.T) {
	for in, want := range map[time.Duration]uint32{0: 0, time.Second: 1, time.Minute: 60, time.Hour: 3600} {
		if got, err := ttlSeconds(in); err != nil || got != want {
			t.Errorf("ttlSeconds(%v) = %d, %v, want %d, nil", in, got, err, want)
		}
	}
	for _, in := range []time.Duration{-time.Second, 1500 * time.Millisecond, 500 * time.Millisecond, 1 << 62} {
		if _, err := ttlSeconds(in); err == nil || !strings.Contains(err.Error(), "--ttl") {
			t.Errorf("ttlSeconds(%v) = %v, want an error naming --ttl", in, err)
		}
	}
}

func TestEndpointFlagsRequest(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    *registryv1.RegisterRequest
		wantErr string
	}{
		{
			name: "full",
			args: []string{"--service", "payments", "--address", "10.0.0.7", "--port", "grpc=8080", "--port", "dns=53/udp",
				"--zone", "z1", "--region", "r1", "--sub-zone", "sz", "--id", "vm-1", "--weight", "7", "--health", "draining",
				"--ttl", "60s", "--meta", "a=1", "--meta", "b=x=y"},
			want: &registryv1.RegisterRequest{
				Service: "payments",
				Endpoint: &registryv1.Endpoint{
					Id:       "vm-1",
					Address:  "10.0.0.7",
					Ports:    []*registryv1.Port{{Name: "grpc", Number: 8080, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}},
					Locality: &registryv1.Locality{Region: "r1", Zone: "z1", SubZone: "sz"},
					Health:   "draining",
					Weight:   7,
					Metadata: map[string]string{"a": "1", "b": "x=y"},
				},
				TtlSeconds: 60,
			},
		},
		{
			name: "minimal",
			args: []string{"--service", "s", "--address", "::1", "--port", "grpc=1", "--zone", "z"},
			want: &registryv1.RegisterRequest{
				Service: "s",
				Endpoint: &registryv1.Endpoint{
					Address:  "::1",
					Ports:    []*registryv1.Port{{Name: "grpc", Number: 1, Protocol: "tcp"}},
					Locality: &registryv1.Locality{Zone: "z"},
				},
			},
		},
		{name: "no_service", args: []string{"--address", "::1", "--port", "grpc=1", "--zone", "z"}, wantErr: "--service is required"},
		{name: "no_address", args: []string{"--service", "s", "--port", "grpc=1", "--zone", "z"}, wantErr: "--address is required"},
		{name: "no_zone", args: []string{"--service", "s", "--address", "::1", "--port", "grpc=1"}, wantErr: "--zone is required"},
		{name: "no_port", args: []string{"--service", "s", "--address", "::1", "--zone", "z"}, wantErr: "--port is required"},
		{name: "bad_port", args: []string{"--service", "s", "--address", "::1", "--zone", "z", "--port", "grpc"}, wantErr: "--port"},
		{name: "bad_weight", args: []string{"--service", "s", "--address", "::1", "--zone", "z", "--port", "grpc=1", "--weight", "0"}, wantErr: "--weight"},
		{name: "bad_ttl", args: []string{"--service", "s", "--address", "::1", "--zone", "z", "--port", "grpc=1", "--ttl", "1.5s"}, wantErr: "--ttl"},
		{name: "bad_meta", args: []string{"--service", "s", "--address", "::1", "--zone", "z", "--port", "grpc=1", "--meta", "k"}, wantErr: "--meta"},
		{name: "duplicate_meta", args: []string{"--service", "s", "--address", "::1", "--zone", "z", "--port", "grpc=1", "--meta", "k=1", "--meta", "k=2"}, wantErr: `key "k" given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f endpointFlags
			f.define(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.request()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("request() = %v, want an error containing %q", err, tt.wantErr)
				}
				if _, ok := err.(*usageError); !ok {
					t.Errorf("request() error is %T, want *usageError (exit 2)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("request() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args []string
		pos  []string
		o    string
	}{
		{[]string{"svc"}, []string{"svc"}, "text"},
		{[]string{"svc", "-o", "json"}, []string{"svc"}, "json"},
		{[]string{"-o", "json", "svc"}, []string{"svc"}, "json"},
		{[]string{"a", "-o", "json", "b"}, []string{"a", "b"}, "json"},
		{[]string{"--", "-o"}, []string{"-o"}, "text"},
		{nil, nil, "text"},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o := fs.String("o", "text", "")
		pos, err := parseInterspersed(fs, tt.args)
		if err != nil {
			t.Fatalf("parseInterspersed(%q) = %v", tt.args, err)
		}
		if diff := cmp.Diff(tt.pos, pos); diff != "" || *o != tt.o {
			t.Errorf("parseInterspersed(%q): -o = %q, want %q; positional (-want +got):\n%s", tt.args, *o, tt.o, diff)
		}
	}
}

func TestDashes(t *testing.T) {
	tests := map[string]string{
		`invalid value "x" for flag -ttl: parse error`: `invalid value "x" for flag --ttl: parse error`,
		`flag provided but not defined: -nope`:         `flag provided but not defined: --nope`,
		`flag needs an argument: -port`:                `flag needs an argument: --port`,
	}
	for in, want := range tests {
		if got := dashes(in); got != want {
			t.Errorf("dashes(%q) = %q, want %q", in, got, want)
		}
	}
}
