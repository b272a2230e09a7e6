// Package svcconfig is the per-service config, owned by service teams
// (one SERVICE.yaml each): the weight strategy (zone-aware, pid,
// zone-aware+pid, static) with its knobs and the regional redirects, and
// the client subsets (subset_mode, subset_size), which the weights step
// reads through Store.Get; and the resilience policies (outlier
// detection, circuit breaker, timeout, retry, fault injection, the
// endpoint-picking policy: Resilience), for package xds to send to the
// service's xDS clients, read through Store.Resilience.
//
// # Sources
//
// A directory of SERVICE.yaml files (Dir, --service-config-dir), watched
// with fsnotify, and the HTTP API (Store.Handler, spillwayctl config).
// The directory wins: the API refuses (409, naming the file) to set or
// delete a service that has a file. Every replica must mount the same
// directory: a replica whose directory lacks a file tombstones it.
//
// Parse is strict: an unknown field, a wrong type or a value out of range
// is an *Error "FILE:LINE: field: problem"; a bad file leaves the
// service's previous config in force. A resilience block that is set
// gets the defaults of the fields it leaves out, so the config the API
// shows is what clients are sent. Valid configs that will not work as
// written (a redirect to a region without endpoints, an endpoint-picking
// policy that ignores PID weights) are accepted with Entry.Warnings.
//
// # Storage and tombstones
//
// The Store, the directory, the audit and the API's skeleton are package
// registry/settings's, with Config as the kind; this package keeps the
// config itself (Parse, Default), the API's Entry and its warnings.
//
// Records live in the shared KV under svcconfig/<service>, with the YAML
// as written; every replica's Store watches the prefix. Deleting (file
// removed, or the API) turns the record into a tombstone
// {deleted_at, yaml} that keeps applying, shown as deleted, for the
// tombstone time (default 7 days); then Get returns the defaults and a
// sweep removes the record. Undelete restores a tombstone (owned by the
// API when its file is gone).
//
// # Audit
//
// With StoreConfig.Audit, every Set, Delete and Undelete (and every
// refused or failed one) is recorded (package security/audit): action
// config, the service, the old and new YAML (a tombstone ends with
// "# (deleted)"), and who: the identity of the request's context, or
// "file:PATH" for a change made by the directory. Expired tombstones
// removed by Sweep are not recorded.
//
// # Concurrency
//
// Get, Resilience, Services, Changed and Version are safe for concurrent
// use; Get and Resilience take no lock, and what they return is shared
// (callers read it, never modify it). Writes go to the KV, then to the
// view. Changed returns a channel closed at the next change.
package svcconfig
