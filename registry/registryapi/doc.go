// Package registryapi serves the spillway.registry.v1 Registry API over
// gRPC and the same messages as JSON over HTTP, so a VM can register and
// heartbeat with curl:
//
//	POST /v1/register     RegisterRequest   -> RegisterResponse
//	POST /v1/heartbeat    HeartbeatRequest  -> HeartbeatResponse
//	POST /v1/deregister   DeregisterRequest -> DeregisterResponse
//	POST /v1/utilization  UtilizationReport -> UtilizationAck (one report)
//	GET  /v1/services                       -> ListServicesResponse
//	GET  /v1/services/{service}/endpoints   -> ListEndpointsResponse
//
// JSON uses the proto field names (snake_case); unknown fields are rejected.
//
// It is an edge: it turns wire messages into registry types and maps errors
// to status codes. Invalid input is InvalidArgument / HTTP 400 with the
// field named in the message (and in the "field" member of the JSON error);
// unknown leases and services are NotFound / 404; an endpoint id owned by
// another source is AlreadyExists / 409. A rejected request changes nothing.
//
// Utilization reports (the ReportUtilization client stream, or one report
// per POST) are handed to Config.Utilization, a UtilizationSink (the
// assembly gives it the load table, package load, which keeps them) for
// the weights planner. A report must name an endpoint the registry holds
// (else NotFound) and, for a VM endpoint, the lease that holds it (else
// NotFound: the lease is gone or another holds the endpoint). On the
// stream the first refused report ends the stream with its status. The
// report's rps, eps and latency_ms (what the backend served: the PID
// controller's error penalty and guard read them) are optional: 0 means
// not reported. An older server ignores them on the gRPC stream but its
// JSON endpoint refuses unknown fields, so a JSON sender sets them only
// against a server of this release or later.
//
// # Authorization
//
// Before any change, every call asks Config.Authorizer (nil allows all)
// whether the caller, the identity the authn interceptors put in the
// context, may do its action on its service: Register "register", Heartbeat
// and HeartbeatStream "heartbeat", Deregister "deregister",
// ReportUtilization and POST /v1/utilization "report" (the lease's or
// report's service), ListServices "read_registry" on "" and ListEndpoints
// "read_registry" on the service. A lease also belongs to the identity
// that registered it (package lease): heartbeating, deregistering or
// reporting under another identity's lease, or registering an endpoint
// whose live lease is another identity's, is refused even when the policy
// allows the action, and "admin" is no exception (its lease expires after
// one TTL without heartbeats). Anonymous is an owner like any identity: a
// lease registered anonymously (or stored before owners were kept, when
// every caller was anonymous) takes only anonymous callers, so a named
// identity cannot use it, and a deployment without credentials works as
// before.
//
// Lease ids are given only to the registrant, in Register's answer:
// ListEndpoints (GET /v1/services/{service}/endpoints) leaves every
// endpoint's lease_id empty, so that reading the registry never hands
// out a lease to act on (an anonymous lease's id is all an anonymous
// caller needs).
//
// A denial is PermissionDenied / HTTP 403 with the message
//
//	permission denied: IDENTITY may not ACTION SERVICE
//	permission denied: IDENTITY may not heartbeat lease L of SERVICE (it belongs to OWNER)
//	permission denied: IDENTITY may not register endpoint E of SERVICE (its lease belongs to OWNER)
//
// (IDENTITY "anonymous" without credentials) and changes nothing: not the
// store, not a lease's deadline, not a utilization report. On
// HeartbeatStream a denial ends the stream; an unknown lease still answers
// found=false.
package registryapi
