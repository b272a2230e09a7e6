// Package adminv1 is the generated code of the spillway.admin.v1 API
// (admin.proto): the read-only load, call graph and zone-aware weights
// service of the xDS side.
package adminv1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative admin.proto
