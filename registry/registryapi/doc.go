// Package registryapi serves the spillway.registry.v1 Registry API over
// gRPC and the same messages as JSON over HTTP, so a VM can register and
// heartbeat with curl:
//
//	POST /v1/register     RegisterRequest   -> RegisterResponse
//	POST /v1/heartbeat    HeartbeatRequest  -> HeartbeatResponse
//	POST /v1/deregister   DeregisterRequest -> DeregisterResponse
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
package registryapi
