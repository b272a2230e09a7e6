// Package clientlib is the Go library a service imports to call other
// services through spillway while the fleet moves from DNS to xDS. A Conn
// holds two gRPC channels to one target service, one resolved from DNS SRV
// records and one from spillway's xDS server, and sends each new RPC on one
// of them: on xDS when the rollout config lets the calling service use it
// and the panic flag (DNS TXT _xds.<domain>) says xds=on, on DNS otherwise.
// Service owners do not change code when their cohort moves to xDS or when
// SREs send everyone back to DNS.
//
// Create a Conn with Dial, naming the target and the calling service:
//
//	conn, err := clientlib.Dial(ctx, "payments",
//		clientlib.WithService("checkout"),
//		clientlib.WithMetadata(map[string]string{"tier": "3"}),
//	)
//	if err != nil {
//		// an option is invalid; the error names it
//	}
//	defer conn.Close()
//
//	client := paymentspb.NewPaymentsClient(conn) // any generated client
//
// The defaults fit a host running spillway's defaults: DNS at
// 127.0.0.1:8053, xDS at 127.0.0.1:18000, the rollout config at
// http://127.0.0.1:18080/v1/rollout, domain spillway.internal. The caller's
// zone and region come from WithZone and WithRegion, or from
// $SPILLWAY_ZONE and $SPILLWAY_REGION.
//
// Make sure to Close the Conn when done with it: it owns two channels and
// a goroutine that polls the rollout config and the panic flag. Close
// cancels RPCs still in flight. A Conn is meant to live as long as the
// process talks to the target; dial once per target and share it.
//
// To bound an RPC, give it a context with a deadline, as with any gRPC
// client:
//
//	ctx, cancel := context.WithTimeout(ctx, time.Second)
//	defer cancel()
//	resp, err := client.Charge(ctx, req)
//
// # Which channel, and when
//
// The rollout decision is made in Dial and again at every poll: the
// calling service's metadata (WithService as "service", WithMetadata, and
// the region and zone unless the metadata has them) is matched against the
// rollout config read from WithRolloutFile, else from WithRolloutURL (see
// package rollout for the rules, and Decide for a dry run). A caller the
// config leaves out, or whose config could not be read at Dial, uses DNS
// and has no xDS channel; Status says why.
//
// The Conn polls at once and then every WithPanicPollInterval (10 s ±
// 10%). Each poll re-reads the rollout config (except the first, right
// after Dial read it; a failed read keeps the last decision and counts in
// Status.RolloutErrors) and, while the caller is eligible, the panic flag;
// then it moves new RPCs if they should be elsewhere:
//
//   - not eligible: DNS. A caller that leaves the rollout moves to DNS like
//     for xds=off, and its xDS channel is closed three polls later (RPCs
//     still on it then are cancelled).
//   - eligible: the channel the flag asks for. A caller that joins the
//     rollout builds its xDS channel and moves once the flag is read and
//     the channel is ready. xds=on moves new RPCs to xDS, xds=off moves
//     them back to DNS: the flag wins over the rollout. A failed flag read
//     keeps the last state; until the first good read the Conn stays on
//     DNS.
//
// Status.Polls counts polls and Status.LastSwitchPoll says during which
// one the last switch happened, so "moved within two polls of the change"
// can be checked without a clock.
//
// A switch never fails an RPC. RPCs and streams in flight finish on the
// channel they started on, which stays open; only new RPCs move. Before
// moving, the Conn makes the other channel READY (it asks it to connect
// and waits: WithXDSTimeout, 10 s, for xDS, which must first get its
// Listener, Route, Cluster and Endpoints; WithSwitchTimeout, 5 s, for DNS;
// meanwhile Status.Reason is ReasonSwitching and RPCs keep using the
// current channel). If it does not get there, nothing moves: the Conn stays where it is,
// logs why, sets Status.Reason (ReasonXDSNotReady or ReasonDNSNotReady) and
// tries again at the next poll, or as soon as xDS turns READY. If the
// active xDS channel falls into TRANSIENT_FAILURE (no backend reachable
// through it) and DNS can be made READY, new RPCs move to DNS
// (ReasonXDSFailure) until xDS is READY again.
//
// When the control plane is down, both channels keep their last endpoints:
// the DNS channel keeps the last good SRV answer, grpc-go's xDS client its
// last resources, and the flag its last value. They resync when it is back:
// the DNS channel at its next lookup (failed lookups are retried with a
// backoff of at most 10 s), the xDS channel when grpc-go reconnects its ADS
// stream (grpc-go's backoff: 1 s, growing 1.6 times per failure, at most
// 120 s; after a 30 s outage, typically within a minute).
//
// # Concurrency
//
// A Conn is safe for concurrent use by many goroutines: Invoke, NewStream,
// Status and Close may be called at any time, from anywhere. Choosing the
// channel costs an RPC one atomic load. All switching is done by one
// goroutine per Conn, which has returned when Close returns. Status returns
// a snapshot that does not change afterwards.
//
// # Errors
//
// Dial returns two kinds of error:
//
//  1. errors.Is(err, ErrInvalidOption): an option is invalid; the message
//     names it, e.g. "clientlib: invalid option: WithService: required".
//  2. A channel could not be created by grpc.NewClient (an invalid
//     WithDialOptions combination).
//
// Nothing on the network makes Dial fail: an unreachable rollout URL, DNS
// server or control plane, or a missing xDS bootstrap, shows in Status, in
// the logs and in the metrics, and the Conn serves from DNS.
//
// RPCs return what grpc-go returns on the channel they used: a context
// error or a gRPC status (status.Code works on both). codes.Unavailable
// means no backend could be reached on that channel; after Close, RPCs fail
// with codes.Canceled ("grpc: the client connection is closing").
//
// # Observability
//
// Status reports the active channel, the reason and a sentence saying why,
// the last switch and the number of switches, the polls, the rollout
// decision and its read errors, the bootstrap, the last flag read and the
// flag read errors. Logs (WithLogger) carry
// component=clientlib, service and target; switches are logged at Info,
// failed flag reads at Warn. WithRegisterer exports, labelled with service
// and target:
//
//	spillway_client_active_channel{channel}       1 for the channel new RPCs use
//	spillway_client_reason{reason}                1 for the current Reason
//	spillway_client_switches_total{to,reason}     switches by destination and Reason
//	spillway_client_eligible{rule}                the rollout decision (1 or 0)
//	spillway_client_panic_flag_xds                last flag read: 1 xds=on, 0 xds=off
//	spillway_client_panic_flag_errors_total       failed flag reads
//	spillway_client_polls_total                   polls begun
//	spillway_client_rollout_errors_total          failed rollout config reads
//
// # Channels
//
// The DNS channel resolves spillway-dns:///<target> with package
// dnsresolver: SRV _grpc._tcp.<target>.<domain> from WithDNSServer (or the
// system resolver), glue addresses, re-resolution at the TTL, and SRV
// weights honoured by the spillway.wrr balancer (package wrr, linked in by
// this package), round_robin where it is not registered.
//
// The xDS channel dials xds:///<target> with grpc-go's xDS resolver. Its
// bootstrap, and so the caller's identity to the control plane, is the
// process's: grpc-go's supported way, one bootstrap per process, which is
// enough when one process is one calling service (the normal case). Set
// $GRPC_XDS_BOOTSTRAP (a file) or $GRPC_XDS_BOOTSTRAP_CONFIG (the JSON) in
// the environment the process starts with; BootstrapJSON writes the
// bootstrap spillway expects: the control plane at WithControlPlane, node
// id "<service>~<host>~<random>", node.cluster = the calling service,
// node.locality from WithRegion and WithZone, node.metadata from the
// caller's metadata, and the server feature ignore_resource_deletion, so
// that a restarting control plane cannot take the channel's Listener or
// Cluster away. grpc-go reads those variables during package
// initialisation, before any of the caller's code runs, so the library
// cannot set them itself; without them an eligible Conn stays on DNS with
// ReasonXDSUnavailable, and the Conn logs a warning when the process
// bootstrap names another service, zone or control plane than its options.
//
// WithPerConnBootstrap gives a Conn the bootstrap above for itself alone,
// so that one process may hold Conns with different identities (tests do;
// so may a process that calls as several services). grpc-go has no
// supported API for a per-channel bootstrap: this uses
// NewXDSResolverWithConfigForTesting, which grpc-go documents as for
// tests, experimental, and not working with CSDS. TestPerConnBootstrapPin
// pins what this rests on (the grpc-go version, one identity per channel,
// the variables read at start) and fails on a grpc-go upgrade until
// someone checks it again. Status.Bootstrap says which bootstrap a Conn
// uses.
//
// WithDialOptions are given to both channels, after the library's own
// (insecure transport credentials, the resolver, the DNS channel's default
// service config), so they can override them.
//
// # Carrying a traffic class
//
// WithPropagation("x-traffic-class") makes both channels send, on every
// RPC, the value the RPC's context carries under that key: what an
// incoming request said, when the service's gRPC server has the
// interceptors of package propagate (propagate.Propagator.ServerOptions),
// or what propagate.With set. A value the caller put in the outgoing
// metadata itself wins. So one tag at the edge reaches every hop of a
// call chain, and each hop's route rules can send it to another target
// (docs/routing.md, "Carrying a traffic class through the call chain").
//
// # TLS
//
// WithTLS is for a spillway whose gRPC and HTTP ports speak TLS: the
// bootstrap's channel_creds become grpc-go's "tls" credentials with the
// given CA, certificate and key files (re-read by grpc-go's file watcher),
// so the ADS and LRS streams are mTLS, and the rollout config is read
// over HTTPS with the same client certificate. The panic flag is a DNS
// TXT record: that poll stays plaintext DNS. The channels to the
// backends themselves are not affected (give WithDialOptions for them).
package clientlib
