package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway/spillway/clientlib/heartbeat"
	"github.com/spillway/spillway/clientlib/utilization"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// jsonOut prints every field, empty ones included, with the proto field
// names, as the HTTP API does.
var jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true, Indent: "  "}

// call runs fn with a client and a context bounded by --timeout.
func call(ctx context.Context, e *env, fn func(ctx context.Context, c registryv1.RegistryClient) error) error {
	conn, err := e.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return fn(ctx, registryv1.NewRegistryClient(conn))
}

var registerCommand = &command{
	name:    "register",
	summary: "register an endpoint under a new lease; print the lease id",
	flags: func(fs *flag.FlagSet) action {
		var f endpointFlags
		f.define(fs)
		return func(ctx context.Context, e *env, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			return call(ctx, e, func(ctx context.Context, c registryv1.RegistryClient) error {
				resp, err := c.Register(ctx, req)
				if err != nil {
					return err
				}
				// Only the lease id: LEASE=$(spillwayctl register ...).
				_, err = fmt.Fprintln(e.stdout, resp.GetLeaseId())
				return err
			})
		}
	},
}

var heartbeatCommand = &command{
	name:    "heartbeat",
	args:    "LEASE_ID",
	nargs:   1,
	summary: "renew a lease once",
	flags: func(*flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			return call(ctx, e, func(ctx context.Context, c registryv1.RegistryClient) error {
				resp, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: args[0]})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "lease %s renewed, ttl %ds\n", resp.GetLeaseId(), resp.GetTtlSeconds())
				return err
			})
		}
	},
}

var deregisterCommand = &command{
	name:    "deregister",
	args:    "LEASE_ID",
	nargs:   1,
	summary: "remove a lease's endpoint and end the lease",
	flags: func(*flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			return call(ctx, e, func(ctx context.Context, c registryv1.RegistryClient) error {
				if _, err := c.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: args[0]}); err != nil {
					return err
				}
				_, err := fmt.Fprintf(e.stdout, "lease %s deregistered\n", args[0])
				return err
			})
		}
	},
}

// outputFlag defines -o and returns a check of its value.
func outputFlag(fs *flag.FlagSet) (format *string, check func() error) {
	format = fs.String("o", "text", "output `format`: text or json")
	return format, func() error {
		if *format != "text" && *format != "json" {
			return usagef("-o %q: want text or json", *format)
		}
		return nil
	}
}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

var servicesCommand = &command{
	name:    "services",
	summary: "list services with their endpoint counts",
	flags: func(fs *flag.FlagSet) action {
		format, check := outputFlag(fs)
		return func(ctx context.Context, e *env, _ []string) error {
			if err := check(); err != nil {
				return err
			}
			return call(ctx, e, func(ctx context.Context, c registryv1.RegistryClient) error {
				resp, err := c.ListServices(ctx, &registryv1.ListServicesRequest{})
				if err != nil {
					return err
				}
				if *format == "json" {
					return printJSON(e.stdout, resp)
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tENDPOINTS\tHEALTHY")
				for _, s := range resp.GetServices() {
					fmt.Fprintf(tw, "%s\t%d\t%d\n", s.GetName(), s.GetEndpoints(), s.GetHealthy())
				}
				return tw.Flush()
			})
		}
	},
}

var endpointsCommand = &command{
	name:    "endpoints",
	args:    "SERVICE",
	nargs:   1,
	summary: "list a service's endpoints from every source",
	flags: func(fs *flag.FlagSet) action {
		format, check := outputFlag(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if err := check(); err != nil {
				return err
			}
			return call(ctx, e, func(ctx context.Context, c registryv1.RegistryClient) error {
				resp, err := c.ListEndpoints(ctx, &registryv1.ListEndpointsRequest{Service: args[0]})
				if err != nil {
					return err
				}
				if *format == "json" {
					return printJSON(e.stdout, resp)
				}
				return endpointTable(e.stdout, resp.GetEndpoints(), time.Now())
			})
		}
	},
}

func endpointTable(w io.Writer, eps []*registryv1.Endpoint, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tPORTS\tZONE\tREGION\tHEALTH\tWEIGHT\tSOURCE\tLAST-SEEN")
	for _, ep := range eps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
			orDash(ep.GetId()), orDash(ep.GetAddress()), formatPorts(ep.GetPorts()),
			orDash(ep.GetLocality().GetZone()), orDash(ep.GetLocality().GetRegion()),
			orDash(ep.GetHealth()), ep.GetWeight(), orDash(ep.GetSource()), age(ep.GetLastSeen(), now))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatPorts writes ports the way --port takes them: grpc=8080/tcp,...
func formatPorts(ps []*registryv1.Port) string {
	if len(ps) == 0 {
		return "-"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.GetName() + "=" + strconv.FormatUint(uint64(p.GetNumber()), 10) + "/" + p.GetProtocol()
	}
	return strings.Join(parts, ",")
}

// age shows how long ago ts was, to the second; "-" when unset. The server
// sends the zero time (0001-01-01) for endpoints that were never seen.
func age(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil || ts.AsTime().IsZero() || ts.AsTime().Year() <= 1 {
		return "-"
	}
	d := max(now.Sub(ts.AsTime()).Round(time.Second), 0)
	return d.String() + " ago"
}

var agentCommand = &command{
	name:    "agent",
	summary: "register, heartbeat in the foreground, deregister on SIGINT/SIGTERM; fails over between --server replicas",
	flags: func(fs *flag.FlagSet) action {
		var f endpointFlags
		f.define(fs)
		interval := fs.Duration("interval", 0, "time between heartbeats (default: a third of the granted TTL)")
		servers := fs.String("server", "", "the spillway replicas, comma-separated `targets`: host:port (a DNS name stands for all its addresses), dns:///host:port (the same), dns://DNS-SERVER/host:port (resolved by that server), passthrough:///host:port (one address), unix:PATH or unix-abstract:NAME (default: the global --server)")
		reportUtil := fs.Bool("report-utilization", false, "also report host CPU (/proc/stat) as the endpoint's utilization to the registry; needs --id")
		utilInterval := fs.Duration("utilization-interval", time.Second, "time between utilization reports, 100ms..5m")
		return func(ctx context.Context, e *env, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			if *reportUtil {
				switch {
				case req.GetEndpoint().GetId() == "":
					return usagef("--report-utilization: needs --id (utilization reports name the endpoint)")
				case *utilInterval < 100*time.Millisecond || *utilInterval > 5*time.Minute:
					return usagef("--utilization-interval %v: must be within 100ms..5m", *utilInterval)
				}
			}
			switch {
			case *interval < 0:
				return usagef("--interval %v: must not be negative", *interval)
			case f.ttl > 0 && *interval >= f.ttl:
				return usagef("--interval %v: must be shorter than --ttl %v", *interval, f.ttl)
			}
			list := e.server
			if *servers != "" {
				list = *servers
			}
			addrs, err := heartbeat.ParseServers(list)
			if err != nil {
				return usagef("--server %q: %v", list, err)
			}
			log := slog.New(slog.NewTextHandler(e.stderr, nil))
			dialOpts, err := e.creds.DialOptions()
			if err != nil {
				return usagef("%v (--tls-ca, --tls-cert, --tls-key, --token-file)", err)
			}
			a, err := heartbeat.New(heartbeat.Config{
				Servers:     addrs,
				DialOptions: dialOpts,
				Service:     req.GetService(),
				Endpoint:    req.GetEndpoint(),
				TTL:         f.ttl,
				Interval:    *interval,
				Logger:      log,
			})
			if err != nil {
				return err
			}
			log.Info("agent starting", "server", strings.Join(addrs, ","), "service", req.GetService(), "address", req.GetEndpoint().GetAddress())
			var reporterDone chan struct{}
			if *reportUtil {
				// The host's CPU, in-flight unknown (utilization = cpu),
				// sent to the server the heartbeats use, under their lease.
				r := &utilization.Reporter{
					Target:      addrs[0],
					DialOptions: dialOpts,
					TargetFunc:  func() string { return a.Status().Active },
					Service:     req.GetService(),
					EndpointID:  req.GetEndpoint().GetId(),
					LeaseFunc:   a.LeaseID,
					Interval:    *utilInterval,
					Source:      utilization.CPUOnly(utilization.HostCPU()),
					Logger:      log.With("component", "utilization"),
				}
				rctx, cancel := context.WithCancel(ctx)
				defer cancel()
				reporterDone = make(chan struct{})
				go func() {
					defer close(reporterDone)
					r.Run(rctx)
				}()
				defer func() { cancel(); <-reporterDone }()
			}
			if err := a.Run(ctx); err != nil {
				return err
			}
			st := a.Status()
			log.Info("agent stopped", "last_server", st.Active, "failovers", st.Failovers)
			return nil
		}
	},
}
