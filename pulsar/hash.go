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

// javaStringHash is Java's String.hashCode of s as an unsigned 32-bit value, reading s
// as Java's decoder (new String(bytes, UTF_8)) does: a code point above the Basic
// Multilingual Plane counts as its two UTF-16 surrogates, and invalid UTF-8 as U+FFFD
// per ill-formed subpart, not per byte (see javaStringHashFrom).
func javaStringHash(s string) uint32 {
	var h uint32
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return javaStringHashFrom(h, s[i:])
		}
		h = 31*h + uint32(c)
	}
	return h
}

// javaStringHashFrom goes on hashing s from h, decoding it as OpenJDK's UTF-8 decoder
// does, which gives one U+FFFD for each longest run of bytes that begins a well-formed
// sequence but does not complete one (a sequence cut short by a byte that cannot follow,
// or by the end), and one for each byte that can begin none: a stray continuation byte,
// C0, C1 and F5 to FF. Second bytes E0:A0-BF, F0:90-BF and F4:80-8F keep a sequence
// well-formed. Unlike the Unicode recommendation, Java reads ED like E1 to EF and
// replaces an encoded surrogate (ED A0-BF xx) by a single U+FFFD, so ED A0 counts as
// one subpart too.
func javaStringHashFrom(h uint32, s string) uint32 {
	const repl = 0xFFFD
	cont := func(i int) bool { return i < len(s) && s[i]&0xc0 == 0x80 }
	for i := 0; i < len(s); {
		b1 := s[i]
		switch {
		case b1 < 0x80:
			h = 31*h + uint32(b1)
			i++
		case b1 >= 0xc2 && b1 <= 0xdf && cont(i+1):
			h = 31*h + (uint32(b1&0x1f)<<6 | uint32(s[i+1]&0x3f))
			i += 2
		case b1 >= 0xe0 && b1 <= 0xef && cont(i+1) && !(b1 == 0xe0 && s[i+1] < 0xa0):
			if !cont(i + 2) {
				h = 31*h + repl
				i += 2
				break
			}
			c := uint32(b1&0x0f)<<12 | uint32(s[i+1]&0x3f)<<6 | uint32(s[i+2]&0x3f)
			if c >= 0xd800 && c <= 0xdfff {
				c = repl
			}
			h = 31*h + c
			i += 3
		case b1 >= 0xf0 && b1 <= 0xf4 && cont(i+1) &&
			!(b1 == 0xf0 && s[i+1] < 0x90) && !(b1 == 0xf4 && s[i+1] >= 0x90):
			switch {
			case !cont(i + 2):
				h = 31*h + repl
				i += 2
			case !cont(i + 3):
				h = 31*h + repl
				i += 3
			default:
				r := rune(b1&0x07)<<18 | rune(s[i+1]&0x3f)<<12 | rune(s[i+2]&0x3f)<<6 | rune(s[i+3]&0x3f)
				r1, r2 := utf16.EncodeRune(r)
				h = 31*(31*h+uint32(r1)) + uint32(r2)
				i += 4
			}
		default:
			h = 31*h + repl
			i++
		}
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
