// Package siphash is SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast
// short-input PRF", 2012) with a 128-bit key and a 64-bit output, the
// pseudorandom function of RFC 9018's DNS server cookies. Sum64 does not
// allocate.
package siphash

import (
	"encoding/binary"
	"math/bits"
)

// Size is the length in bytes of a SipHash-2-4 output.
const Size = 8

// Sum64 returns SipHash-2-4 of msg under key. The reference
// implementation writes the result as the 8 bytes of the returned value
// in little-endian order (binary.LittleEndian.PutUint64).
func Sum64(key *[16]byte, msg []byte) uint64 {
	k0 := binary.LittleEndian.Uint64(key[0:8])
	k1 := binary.LittleEndian.Uint64(key[8:16])
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573

	n := len(msg)
	for len(msg) >= 8 {
		m := binary.LittleEndian.Uint64(msg)
		v3 ^= m
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0 ^= m
		msg = msg[8:]
	}
	// The last block: the remaining bytes, zero padded, with the message
	// length mod 256 in the top byte.
	last := uint64(n) << 56
	for i, c := range msg {
		last |= uint64(c) << (8 * i)
	}
	v3 ^= last
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0 ^= last

	v2 ^= 0xff
	for range 4 {
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// round is one SipRound.
func round(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
