// Command spillwayctl is the SRE command line of spillway: it registers,
// heartbeats and deregisters VM endpoints, lists what the registry holds,
// and flips the panic flag and the rollout config, over the server's gRPC
// port. config, route, audit and cluster-version use the HTTP API; they
// ask the gRPC port where it is, so --server alone reaches every API.
//
// Usage:
//
//	spillwayctl [--server ADDR] [--timeout D] [--tls-ca F [--tls-cert F --tls-key F]] [--token-file F] COMMAND [flags] [args]
//
// Global flags, before the command:
//
//	--server ADDR   gRPC address of the spillway server (default 127.0.0.1:18000);
//	                for agent, a comma-separated list of replicas; the HTTP
//	                commands (config, route, audit) ask it for the HTTP address
//	--timeout D     timeout of each request (default 5s)
//	--tls-ca F      PEM CA bundle of the server's certificate: TLS for gRPC
//	                and for the HTTP calls of config, route and audit
//	                (spillway --tls-cert)
//	--tls-cert F, --tls-key F
//	                client certificate and key (mTLS, spillway --client-ca)
//	--token-file F  bearer token sent with every call (a command's --token
//	                wins; it wins over $SPILLWAY_ADMIN_TOKEN)
//
// The agent uses the same flags for its heartbeats and utilization
// reports. See docs/security.md.
//
// Commands:
//
//	register --service S --address IP --port NAME=PORT[/PROTO]... --zone Z
//	         [--region R] [--sub-zone SZ] [--id ID] [--weight N] [--health H]
//	         [--ttl D] [--meta KEY=VALUE]...
//	    Register an endpoint under a new lease and print only the lease id,
//	    so that LEASE=$(spillwayctl register ...) works. --port and --meta
//	    repeat; PROTO is tcp (the default) or udp.
//	heartbeat LEASE_ID
//	    Renew a lease once.
//	deregister LEASE_ID
//	    Remove the lease's endpoint and end the lease.
//	services [-o text|json]
//	    List services: NAME ENDPOINTS HEALTHY.
//	endpoints SERVICE [-o text|json]
//	    List a service's endpoints from every source. -o json prints every
//	    field of every endpoint, empty ones included, with the proto field
//	    names (snake_case), for scripts.
//	agent <register's flags> [--interval D] [--server ADDR,ADDR...] [--report-utilization [--utilization-interval D]]
//	    Register, heartbeat every --interval (default a third of the TTL)
//	    and stay in the foreground; on SIGINT or SIGTERM deregister and exit
//	    0. Logs go to stderr. --server (here or global) may list several
//	    replicas, comma-separated, or name one DNS name with several
//	    addresses: the agent uses one and moves to the next when it stops
//	    answering, keeping its lease (it registers again, with the same
//	    endpoint id, only if the new replica does not know the lease).
//	    Each entry is host:port or a gRPC target: dns:///host:port (the
//	    same as host:port), dns://DNS-SERVER/host:port (resolved by that
//	    DNS server), passthrough:///host:port (one address, resolved by the
//	    dialer), unix:PATH, unix:///ABSOLUTE-PATH or unix-abstract:NAME;
//	    other schemes (xds, ipv4, ipv6) are refused, naming the entry.
//	    --report-utilization (needs --id) also streams the host's CPU from
//	    /proc/stat every --utilization-interval (default 1s) to the server
//	    in use, under the agent's lease; in-flight is unknown, so the
//	    endpoint's utilization is its CPU.
//	load SERVICE [-o text|json]
//	    Show the load clients report over LRS for SERVICE: one row per client
//	    service, client zone and upstream locality. With replicas sharing
//	    load, the service's owner shows the mesh-wide merged table (client
//	    service "(all)", per client zone and zone) after a line naming the
//	    replicas it merged and their ages; any other replica shows its own
//	    load after "load reported to this replica only; the owner R merges
//	    every replica's".
//	graph [-o text|json|dot]
//	    Show who calls whom (client service -> service) with rps and ADS
//	    streams; -o dot prints a Graphviz digraph.
//	weights SERVICE [-o text|json]
//	    Explain SERVICE's zone-aware weights as of the server's last weights
//	    cycle: the demand source, fallback and data age; the plan line
//	    (mesh: the owner that computed it, the replicas whose load it
//	    merged with their ages, when it was published, in UTC; local: this
//	    replica's own view, and why the published plan was not used); per upstream zone
//	    the capacity (adjusted/raw: slow start, queue and error factors),
//	    demand and load; per client zone the demand, local share, spill and
//	    weights, with the reason when a fallback is in force; for a service
//	    in several regions or with regional rules (docs/routing.md), the
//	    redirects and exclusions set (active or expired) and per client
//	    region the priority order and whether each rule applied. NotFound
//	    when the service has no weights (unknown, or --zone-aware off).
//	panic on|off|status [--token T] [-o text|json]
//	    The panic button. on publishes TXT _xds.<domain> "xds=off": every
//	    client goes back to DNS; off publishes "xds=on": eligible clients
//	    may use xDS again; status shows the flag and when it changed.
//	rollout show [-o text|json|yaml]
//	    Show the rollout config in force: version, rules; -o yaml prints it
//	    as set, to edit and set again.
//	rollout set FILE [--token T]
//	    Replace the rollout config with the YAML in FILE. An invalid config
//	    is refused with the field named; the old one stays in force.
//	rollout validate FILE [-o text|json]
//	    Dry run: SERVICE BUCKET RULE ELIGIBLE for every known client
//	    service (xDS node.cluster and registry services, matched on their
//	    name only) and a summary. Changes nothing.
//	config list | get S | set S FILE | delete S | undelete S [--http ADDR] [--token T] [-o text|json|yaml]
//	    Per-service weight strategy config over the HTTP API
//	    (docs/service-config.md; on --http, see below). set refuses a bad
//	    field by name, and a service owned by a --service-config-dir file
//	    (HTTP 409); delete tombstones (the config keeps applying, shown as
//	    deleted, until the tombstone time); undelete brings it back. list's
//	    POLICIES column sums up each service's resilience policies
//	    ("outlier(sr,fp) timeout=5s retry(2×unavailable) ring_hash(x-user)",
//	    - for none); get prints them one line per policy, every value with
//	    its unit, under "resilience:" before the config as JSON. -o json
//	    prints the API's answer as it is.
//	route list | get S | set S FILE | delete S | validate S FILE [-f FILE] [--path P] [--header "K: V"]... [--http ADDR] [--token T] [-o text|json|yaml]
//	    Per-service route rules over the HTTP API (docs/routing.md). set
//	    refuses a bad field, a target that is not registered or a rule
//	    that would reach no healthy endpoint, naming the field, and
//	    changes nothing; get shows each rule, and the broken ones (target
//	    gone: their RPCs take the default route). validate is a dry run:
//	    the targets with their healthy endpoints, and which rule takes the
//	    sample request --path/--header.
//	audit [--since D|TIME] [--limit N] [--http ADDR] [--token T] [-o text|json]
//	    Recent audit entries of every replica, newest first (GET
//	    /v1/audit; needs read_audit, by default the admin token): TIME (in
//	    your zone) IDENTITY ACTION RESOURCE OUTCOME CHANGE (old → new, and
//	    the reason of a denial or failure). --since takes a duration back
//	    from now (1h) or an RFC 3339 time; --limit at most 1000.
//	cluster-version [show | hold | release] [--if-version REV] [--http ADDR] [--token T] [-o text|json]
//	    The cluster version the replicas of a shared store run at
//	    (docs/replication.md, "Upgrades, version skew and shutdown"). show
//	    (the default) prints it, the hold, each live member with the
//	    highest version its binary supports, and what finalisation waits
//	    for. hold, before an upgrade, keeps the version from being raised,
//	    so that rolling back stays possible; release lets the replicas
//	    finalise once every live one supports the next version. hold and
//	    release need the panic right (the admin token by default);
//	    --if-version applies them only while the record is at the
//	    revision show printed (else HTTP 412, nothing changes).
//	token new NAME
//	    Print a fresh random bearer token for identity NAME (line 1) and
//	    its entry for the server's --tokens-file (line 2), which holds only
//	    the token's SHA-256 (docs/security.md). Needs no server.
//
// config, route, audit and cluster-version find the HTTP API through
// --server: they ask the gRPC port (spillway.info.v1.ServerInfo, which
// needs no permission but passes the same authentication as every call,
// with the command's token) for the HTTP listener's address and whether
// it speaks TLS. A wildcard listener (":18080", "0.0.0.0:18080", "[::]:18080") is reached
// on --server's host at the reported port; a loopback one on --server's
// host too unless --server is on loopback itself. The call is https when
// the server says so or --tls-ca is given, and the HTTP certificate is
// checked for --server's host name. --http ADDR, when given, wins and
// skips the question (http, or https with --tls-ca); a server older than
// this spillwayctl cannot answer, and the command then fails asking for
// --http ADDR (the server's --http-addr, by default 127.0.0.1:18080).
//
// The changes (panic on|off, rollout set, config set|delete|undelete,
// route set|delete, cluster-version hold|release) need the server's admin token
// (spillway --admin-token-file): --token, the global --token-file, or $SPILLWAY_ADMIN_TOKEN, which
// keeps it out of the process list. Without it they fail with
// PermissionDenied and change nothing; a token the server does not know
// fails with Unauthenticated.
//
// Example:
//
//	LEASE=$(spillwayctl register --service payments --address 10.0.0.7 \
//	    --port grpc=8080 --zone eu-west1-b --ttl 60s)
//	spillwayctl heartbeat "$LEASE"
//	spillwayctl endpoints payments -o json | jq '.endpoints[].last_seen'
//	spillwayctl deregister "$LEASE"
//	SPILLWAY_ADMIN_TOKEN=$(cat /etc/spillway/admin-token) spillwayctl panic on
//
// Exit status: 0 on success; 1 when the request failed, with the server's
// message (which names the bad field) on stderr; 2 for a bad command line,
// with a message naming the flag.
package main
