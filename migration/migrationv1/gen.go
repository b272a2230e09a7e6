// Package migrationv1 is the generated code of the spillway.migration.v1
// API (migration.proto): the panic flag and the rollout config, read by
// anyone and changed with the admin token.
package migrationv1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative migration.proto
