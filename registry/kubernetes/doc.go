// Package kubernetes feeds the registry from the discovery.k8s.io/v1
// EndpointSlices of one or more Kubernetes clusters.
//
// # Mapping
//
// The EndpointSlices of a Kubernetes Service (label
// kubernetes.io/service-name) named name in namespace ns become the
// registry service "name.ns" (Config.ServiceName changes the template). All
// slices of a Service are merged, in every watched cluster: the same Service
// seen in several clusters is one registry service. Per endpoint:
//
//   - address: the first address; IPv4 and IPv6 slices both count (a
//     dual-stack pod is two endpoints), FQDN slices are ignored.
//   - health: ready and not terminating → healthy; terminating and serving →
//     draining; anything else (not ready, or terminating and not serving) →
//     not in the registry.
//   - id: a DNS label from the pod name (targetRef), else the hostname,
//     else the address and first port (registry.DefaultEndpointID); "-v6"
//     is appended for IPv6 slices, and "-<cluster>" when more than one
//     cluster is watched, so ids are unique within a service across
//     clusters. Too long a name is cut and completed with a hash.
//   - ports: the slice's ports, named as in the Service (an unnamed port
//     gets Config.UnnamedPort, "grpc" by default), TCP or UDP (SCTP ports
//     are ignored); these names are the SRV port names.
//   - locality: zone from the endpoint's zone field, else from its node's
//     topology.kubernetes.io/zone label; region from the node's
//     topology.kubernetes.io/region label.
//   - Registered: zero (long ago) for endpoints present when a cluster first
//     syncs, so a restarted spillway does not slow-start the fleet; the time
//     it was first seen for later ones.
//
// # Stability
//
// Every change is applied as desired state: when a Service's slices change,
// its endpoints in every cluster are recomputed from the informer caches and
// the difference with the store is applied in one atomic batch. A relist or
// a resync that brings nothing new costs no store write (the handlers drop
// updates whose slimmed content is unchanged, and an unchanged recomputation
// produces no op). A rolling update never shows a Service with zero healthy
// endpoints unless the cluster itself had none: the store only ever holds a
// state the API server held, never a removal applied before the addition
// that preceded it.
//
// # Unreachable clusters
//
// When list or watch calls to a cluster fail, the cluster is stale: its
// last known endpoints are kept, spillway_kubernetes_cluster_stale{cluster}
// is 1, Status reports it (the server shows it on /readyz) and a warning is
// logged. It recovers by itself when calls succeed again. With
// Config.MaxStaleness set, a cluster stale for longer has its endpoints
// removed until it is back. A cluster that has not synced within
// Config.SyncTimeout does not hold back Run's ready signal; it is marked
// stale until it syncs.
//
// # Usage
//
//	src, err := kubernetes.New(kubernetes.Config{
//		Clusters: []kubernetes.ClusterConfig{{Name: "east", Kubeconfig: "east.yaml"}},
//		Store:    store,
//		Logger:   logger,
//	})
//	if err != nil { ... }
//	ready := make(chan struct{}, 1)
//	go src.Run(ctx, ready)
//	<-ready            // every cluster synced, or SyncTimeout passed
//	store.MarkSynced()
//
// # Concurrency
//
// Informer handlers only record the keys of changed Services and Nodes and
// wake the cluster's worker through a one-slot channel; one worker per
// cluster reads the informer caches and applies. Workers of different
// clusters serialise on the merge step, which computes the union of every
// cluster's endpoints for a service and applies it. Status may be called
// from any goroutine.
package kubernetes
