// Package rrl is DNS response rate limiting per source prefix, the defence
// BIND and Knot call RRL: a UDP querier can be anyone whose address an
// attacker forges, so an authoritative server that answers every packet
// reflects (and amplifies) a flood onto the forged address. A Limiter
// keeps one token bucket per source prefix (IPv4 /24 and IPv6 /56 by
// default): a prefix is answered at Config.Rate responses per second after
// a burst of Config.Burst, and every Config.Slip-th response it is refused
// is sent truncated instead of dropped, so that a real client retries over
// TCP, which a forger cannot complete and which is not limited.
//
// Unlike BIND, whose balance goes negative down to -window × rate and so
// answers nothing while a flood goes on, a refused response costs nothing
// here: a prefix above the rate keeps getting Rate answers per second,
// which bounds the reflection at Rate × the response size and leaves real
// queriers behind a busy prefix some answers. All responses of a prefix
// share one allowance (BIND keeps apart answers per name and errors).
// With Slip 1 (the spillway command's default, with Rate 1000) every
// refused response is slipped, so a flood past the rate reflects no more
// bytes than it sent and a real client always learns to use TCP.
// Sources in Config.Exempt (networks whose addresses cannot be forged)
// are never limited and never tracked.
//
// # Usage
//
//	l, err := rrl.New(rrl.Config{Rate: 1000, Slip: 1}, time.Now())
//	switch l.Allow(src, time.Now()) {
//	case rrl.Answer, rrl.Exempt: // send the response
//	case rrl.Slip:               // send a TC response without records
//	case rrl.Drop:               // send nothing
//	}
//
// # Concurrency and cost
//
// Allow is safe for concurrent use. It first checks Config.Exempt in
// order (a few nanoseconds a prefix). The table is split into up to 64
// shards by a seeded hash of the prefix, each with its own mutex, held
// only to update one entry, so queries from different prefixes rarely
// contend. An entry is the generic cell rate algorithm's one timestamp
// and a drop count, about 100 bytes with its index; the table holds at
// most Config.TableSize entries, evicting the prefix seen least recently
// in its shard, which then starts again with a full burst (a forger
// spraying prefixes can reset others' allowances this way, never grow the
// table). Allow does not allocate once its shard has grown.
package rrl
