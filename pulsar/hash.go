package pulsar

import "math/bits"

// HashingScheme chooses the partition of a keyed message.
type HashingScheme int

const (
	// JavaStringHash is 31*h+b over the key's bytes, the official Go client's default.
	JavaStringHash HashingScheme = iota
	// Murmur3_32Hash is Murmur3 (32-bit, seed 0) masked to 31 bits, the Java client's option.
	Murmur3_32Hash
)

func (s HashingScheme) partition(key string, n int) int {
	var h uint32
	switch s {
	case Murmur3_32Hash:
		h = murmur3(key) & 0x7fffffff
	default:
		h = javaStringHash(key)
	}
	return int(h % uint32(n))
}

func javaStringHash(s string) uint32 {
	var h uint32
	for i := 0; i < len(s); i++ {
		h = 31*h + uint32(s[i])
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
