package etcdstore

// SetListLimits makes kv's List read pages of page keys and split ranges
// of more than split keys, so that tests reach the splitting with few
// keys.
func SetListLimits(kv *KV, page, split int64) { kv.listPage, kv.listSplit = page, split }
