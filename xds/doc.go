// Package xds will be spillway's ADS and LRS control plane for proxyless
// gRPC and Envoy, with zone-aware locality weights. It is empty until the xDS
// issue lands.
package xds
