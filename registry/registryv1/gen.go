// Package registryv1 is the generated code of the spillway.registry.v1 API
// (registry.proto): the VM registration service and its messages.
package registryv1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative registry.proto
