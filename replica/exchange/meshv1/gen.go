// Package meshv1 is the generated code of the spillway.mesh.v1 API
// (mesh.proto): the replica-to-replica load summary stream.
package meshv1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative mesh.proto
