// Package boltstore is the system store (systemstore.KV) in one embedded bbolt
// file: the default, for one replica. Watch sees the writes of this
// process only (the file is locked against others). Open opens the file in
// a data dir; OpenStore wraps it as a systemstore.Store. The layout (buckets,
// revisions, tombstones kept TombstoneRetention for watch replay) is in
// boltstore.go; data dirs of earlier releases are moved into it once on
// open.
package boltstore
