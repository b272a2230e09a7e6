// Package authz decides whether an identity may perform an action on a
// resource, from the policy file (--authz-file).
package authz

// Action is what a caller asks to do. The resource it applies to is
// given with it: a service name for the service actions, "" for the
// global ones.
type Action string

// Actions, as the policy file and denials name them.
const (
	// Register, Heartbeat, Deregister and Report act on one service's VM
	// endpoints (Report: their utilization reports). Resource: the
	// service.
	Register   Action = "register"
	Heartbeat  Action = "heartbeat"
	Deregister Action = "deregister"
	Report     Action = "report"
	// ReadRegistry lists services and endpoints (gRPC ListServices,
	// ListEndpoints; HTTP GET /v1/services...). Resource: "" or a
	// service.
	ReadRegistry Action = "read_registry"
	// Panic and Rollout change the migration state. Resource: "".
	Panic   Action = "panic"
	Rollout Action = "rollout"
	// Routes and Config change a service's route rules and per-service
	// weight config. Resource: the service.
	Routes Action = "routes"
	Config Action = "config"
	// ReadLoad reads load, graph and weights (/v1/load, /v1/graph,
	// /v1/weights and their gRPC twins). Resource: "" or a service.
	ReadLoad Action = "read_load"
	// XDS connects as an xDS client (ADS, LRS). Resource: the node's
	// cluster, so a policy can bind a workload to its own service name.
	XDS Action = "xds"
	// Mesh is a replica sending load summaries to another (the load
	// exchange). Resource: "".
	Mesh Action = "mesh"
	// ReadAudit lists audit entries. Resource: "".
	ReadAudit Action = "read_audit"
)

// Actions lists every action, in the order above.
var Actions = []Action{Register, Heartbeat, Deregister, Report, ReadRegistry, Panic, Rollout, Routes, Config, ReadLoad, XDS, Mesh, ReadAudit}
