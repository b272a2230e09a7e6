package systemstore

import "context"

// BatchPutter is what a KV may add to write many records in few round
// trips: a consumer with many writes type-asserts its KV for it and
// falls back to Put, one record at a time, when the store has none.
// etcdstore implements it; boltstore, spannerstore and the test stores
// do not.
type BatchPutter interface {
	// PutBatch stores each puts[i].Value under puts[i].Key (Rev is
	// ignored), as that many Puts in order would: the store takes a
	// prefix of puts, and n says how many (all of them when err is nil).
	// A record is never taken before the ones ahead of it; records of one
	// round trip are taken together or not at all. A record that Put
	// would refuse (ValidatePut) is refused with an error wrapping
	// ErrInvalid, and n is its index: the records before it are written,
	// none after. As with Put, a failed round trip may still have been
	// applied; n counts only what the store acknowledged.
	PutBatch(ctx context.Context, puts []KeyValue) (n int, err error)
}
