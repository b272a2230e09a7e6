// Package static feeds the registry from a YAML file of services and
// endpoints, and reloads it when the file changes.
//
// # File format
//
// The file is one YAML document with one field, services, a list of
// services; each has a name and a list of endpoints (possibly empty or
// absent: the service is then known, with no endpoints, which DNS answers
// as NODATA rather than NXDOMAIN):
//
//	services:
//	  - name: payments
//	    endpoints:
//	      - id: pay-1            # optional, default "<address>-<first port>": 10-0-0-1-8080
//	        address: 10.0.0.1
//	        ports: [{name: grpc, number: 8080, protocol: tcp}]
//	        zone: us-east1-a     # optional, like region and sub_zone
//	        region: us-east1
//	        sub_zone: ""
//	        health: healthy      # optional: healthy (default), draining or unhealthy
//	        weight: 100          # optional: 1..65535, default 100
//	        metadata: {version: v2}
//	      - address: 2001:db8::7
//	        ports: ["grpc=8080/tcp", "metrics=9090"]
//	  - name: empty-service
//
// A port is a mapping {name, number, protocol} or the shorthand
// "name=number[/protocol]"; protocol is tcp (the default) or udp. Names
// (services, ids, ports, zones) follow the registry's rules: DNS labels,
// lower-cased for services, ids and ports. Unknown fields, repeated fields,
// repeated services or endpoint ids, YAML aliases, several documents and an
// empty file are errors. An error names the field by its path and line:
//
//	line 7: services[0].endpoints[2].address: "10.0.0.x" is not an IP address
//
// # Semantics
//
// The file owns the store's endpoints whose Source is registry.SourceStatic:
// one Source per store. Each load applies one atomic batch that upserts new
// and changed endpoints, removes static endpoints the file no longer lists,
// declares every listed service, and forgets services the previous load
// listed that are now gone and have no endpoints left. An endpoint's
// Registered time is the load that first saw it, and is kept while its id
// and address stay the same, so reloading unchanged content writes nothing.
// A file that cannot be read, parsed or validated, that lists an endpoint
// id another source owns, or a name the store refuses (an SRV target
// <id>.<service>.<domain> over 255 octets, or a service "a.b" next to
// endpoint a of service b), changes nothing: the previous load stays.
//
// # Usage
//
//	src, err := static.New(static.Config{Path: "services.yaml", Store: store, Logger: logger})
//	if err != nil { ... }
//	if err := src.Load(); err != nil { ... } // before the store is marked synced
//	go src.Run(ctx)                          // reloads on change until ctx ends
//
// # Concurrency
//
// Load and Run may be called from any goroutine; loads are serialised. Run
// watches the file's directory, so it follows files replaced by rename and
// Kubernetes ConfigMap volumes; a file reached through a symlink into
// another directory is only reloaded when the link itself changes.
package static
