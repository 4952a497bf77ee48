package pulsar

import (
	"math/bits"
	"unicode/utf16"
)

// HashingScheme chooses the partition of a keyed message. Both schemes give the
// partition the reference Java client gives the same key, so a key lands on one
// partition whichever of the two clients published it.
type HashingScheme int

const (
	// JavaStringHash is Java's String.hashCode of the key (31*h+c over its UTF-16 code
	// units) masked to 31 bits, modulo the partition count: the Java client's default.
	// (The official Go client hashes UTF-8 bytes and does not mask, so it disagrees with
	// Java for about half of all keys of seven characters or more on a partitioned topic.)
	JavaStringHash HashingScheme = iota
	// Murmur3_32Hash is Murmur3 (32-bit, seed 0) of the key's UTF-8 bytes masked to 31
	// bits, the Java client's other scheme.
	Murmur3_32Hash
)

// Partition is the partition, of n, that a message with key goes to: what the Java
// client's router computes for the same key and scheme.
func (s HashingScheme) Partition(key string, n int) int {
	var h uint32
	switch s {
	case Murmur3_32Hash:
		h = murmur3(key)
	default:
		h = javaStringHash(key)
	}
	return int((h & 0x7fffffff) % uint32(n))
}

// javaStringHash is Java's String.hashCode of s as an unsigned 32-bit value: a code
// point above the Basic Multilingual Plane counts as its two UTF-16 surrogates, and an
// invalid UTF-8 byte as U+FFFD, as Java's decoder reads it.
func javaStringHash(s string) uint32 {
	var h uint32
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x80 {
			h = 31*h + uint32(c)
			continue
		}
		for _, r := range s[i:] {
			if r1, r2 := utf16.EncodeRune(r); r1 != '\uFFFD' {
				h = 31*(31*h+uint32(r1)) + uint32(r2)
			} else {
				h = 31*h + uint32(r)
			}
		}
		break
	}
	return h
}

// murmur3 is MurmurHash3 x86 32-bit with seed 0.
func murmur3(s string) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	var h uint32
	n := len(s)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch n - i {
	case 3:
		k ^= uint32(s[i+2]) << 16
		fallthrough
	case 2:
		k ^= uint32(s[i+1]) << 8
		fallthrough
	case 1:
		k ^= uint32(s[i])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
