// Package plaincheck holds only a test: a grpc-go xDS client in a binary
// that does not import clientlib/wrr (balancer registration is
// process-wide) still works against spillway's Cluster, with round_robin.
// It is the plain-client half of the endpoint-weight acceptance test; the
// weighted half is in package xds's tests, whose binary imports
// clientlib/wrr.
package plaincheck
