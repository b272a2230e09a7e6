// Package exchange carries load summaries from every replica to each
// service's owner replica (issue 13, "load reaches the owner"): each
// client's LRS stream lands on one replica, so no replica sees a
// service's whole demand; the owner merges every replica's summary and
// computes the service's weights from the sum.
//
// The wire is spillway.mesh.v1 (package meshv1): one long-lived
// client stream LoadExchange.Report per (sender, owner address), one
// Summary message per report interval holding only the services that
// owner owns (split into several messages past MaxServices services or
// about 1 MiB). A flow's newest report travels as its age relative to the
// summary's time, and the owner places it on its own clock on arrival,
// so replica clock skew does not age load.
//
// # Usage
//
// Every replica runs a Sender. Local is usually
//
//	func(now time.Time) []load.ServiceSummary {
//		return exchange.SummarizeWith(table.Loads("", now), clientCounts(), utilizations.All(now))
//	}
//
// so a summary also carries the latest utilization report of each
// endpoint that reported to the replica (a backend's reports may reach
// any replica); like a flow's, a report's arrival travels as its age
// relative to the summary's time. A report carries the backend's
// requests, errors per second and mean latency when it has them
// (EndpointReport fields 7 to 9, optional: a replica before them ignores
// them, and its summaries read as not reported, 0), so the owner's PID
// error penalty and guard see what every replica saw.
//
// Route asks ownership for the service's owner and its gRPC address, and
// Deliver hands the summary of the services the replica owns itself to
// its own Merged (merged.Add(s, time.Now())) without the network.
//
// The owner side registers a Server on the replica's gRPC server
// (srv.Register(grpcServer)) over a Merged, which is what the weights
// planner reads: Loads and ClientCounts (its LoadSource and
// ClientSource), Utilizations (per endpoint the newest report among
// fresh senders, itself fresh: now - Reported <= 3 × the report's
// interval), Contributors (for explain), Fresh (a summary arrived after
// a time) and Acked (a summary that arrived after a time lists a shard at
// an epoch: an owner that just took a shard waits for it from every live
// replica). With Owners set, a Sender sends every recorded owner one
// summary each round, even with no services, listing the shards (with
// their ownership epochs) it routes to that owner.
//
// # Freshness and bounds
//
// Merged keeps per (sender, service) the latest summary, its arrival time
// and the sender's interval; it counts only summaries that arrived within
// FreshIntervals (3) of their sender's interval. A service a sender stops
// reporting therefore drops out of the sums after 3 intervals. Senders
// and services silent for 5 minutes are forgotten; at most 256 senders
// and 100,000 services and 1,000,000 endpoint reports per sender are
// held (MergedConfig), and a summary
// past those bounds is refused whole (ErrFull, ResourceExhausted on the
// wire). Each sender also has a byte budget (MaxBytes, 64 MiB as
// estimated by Merged): a service whose summary would take its sender
// past it is dropped, its older summary too, and counted (Budget).
//
// # Admission
//
// With ServerConfig.Members (cmd/spillway sets it to the ownership's
// live members) the Server keeps only what live replicas send:
//
//   - a stream without a verified client certificate (plaintext, or TLS
//     without one) must come from the IP address of a live member's
//     GRPCAddr (names resolved, cached 30 s); else PermissionDenied
//     naming the address, before anything is read; a stream over one
//     must carry the identity some live member's record names;
//   - the stream's peer must be the summary's member: the certificate's
//     identity the one its record names, or the peer's address one of
//     its GRPCAddr host's. A record without identity (a release before
//     identities were recorded) is taken over any certificate on the
//     mesh grant alone while the cluster version (ServerConfig.Versions)
//     is below 2; from clusterversion.StrictSenderBinding (2) on it
//     binds no certificate (identity_missing), and RefusesCertificates
//     tells the owner not to wait for such a member's acknowledgement;
//   - each summary's replica id must be a live member other than the
//     owner itself (Self); else PermissionDenied naming it, nothing of it
//     stored;
//   - a new sender first makes the Merged forget held senders that are
//     no longer live once as many are held as there are live members,
//     so the senders held are bounded by the live members;
//   - with ServerConfig.Services, a summary's services are kept only
//     when registered in this replica's registry and owned here (or in
//     a shard the summary lists as routed here: a new owner's
//     acknowledgement may arrive a moment before it marks the shard
//     owned); the others are dropped before anything is stored (an unregistered name
//     costs no memory).
//
// Refusals count in spillway_mesh_load_refused_total{reason} (not_member,
// peer_address, peer_identity, not_bound, identity_missing), drops in
// spillway_mesh_load_dropped_services_total{reason} (unregistered,
// not_owned, budget); each reason is logged at most once per 10 s. The
// wire is unchanged: a replica of an earlier release that is a live
// member sends as before, in plaintext always, over mTLS until the
// cluster version reaches 2 (which needs every live member on this
// release).
//
// Every received message is validated whole (FromProto) before anything
// of it is stored: replica id (letters, digits and -_.:=@+, at most 128),
// interval, service names (registry rules), zones (a DNS label or ""),
// rates (finite, >= 0), counts and list lengths (bounded, at most
// 10,000 endpoint reports per service), endpoint reports in the registry
// API's ranges (id a DNS label, cpu 0..1.5, in_flight and limit
// 0..2^20, interval 100 ms..5 min), no duplicates. An invalid message ends the stream with InvalidArgument
// naming the field (summary.services[3].flows[0].issued) and leaves
// Merged unchanged. A stream carries one replica's summaries.
//
// # Failure
//
// Each owner address has its own goroutine and stream, holding at most
// the newest round: a slow or dead owner never delays the others, and a
// round that cannot be sent is dropped (counted), never queued, since the
// next interval has fresher data. After a failure a sender waits a
// backoff (from min(interval, 1 s), doubling to 30 s) before it dials
// again; an owner that does not answer within 3 intervals is given up.
// Services with no owner are skipped and counted.
//
// # Metrics
//
//	spillway_mesh_load_summaries_total{result}   accepted, invalid, full; sent, delivered, dropped
//	spillway_mesh_load_bytes_total{direction}    received, sent
//	spillway_mesh_load_unrouted_services_total
//	spillway_mesh_load_refused_total{reason}           not_member, peer_address, peer_identity, not_bound, identity_missing
//	spillway_mesh_load_dropped_services_total{reason}  unregistered, not_owned, budget
//
// # Concurrency
//
// Merged and Server are safe for concurrent use. A Sender's fields are
// read-only once Run is called; Run is called once and owns the Sender's
// state; Local and Route are called on Run's goroutine, Deliver too.
package exchange
