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
// per POST) are stored in Config.Utilization, a load.UtilizationTable, for
// the weights planner. A report must name an endpoint the registry holds
// (else NotFound) and, for a VM endpoint, the lease that holds it (else
// NotFound: the lease is gone or another holds the endpoint). On the
// stream the first refused report ends the stream with its status.
package registryapi
