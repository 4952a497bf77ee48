package pulsar

import "testing"

// TestJavaStringHashReadsInvalidUTF8AsJavasDecoderDoes: javaStringHash says it reads
// invalid UTF-8 as Java's decoder does, but it counts one U+FFFD per byte, where Java's
// (new String(bytes, UTF_8), JDK 17) gives one per maximal ill-formed subpart: a
// truncated sequence, or an encoded surrogate, is one U+FFFD. The values are what
// OpenJDK 17 prints for (new String(b, UTF_8).hashCode() & 0x7fffffff).
func TestJavaStringHashReadsInvalidUTF8AsJavasDecoderDoes(t *testing.T) {
	for in, java := range map[string]uint32{
		"\xe2\x82A":    2031588, // a 3-byte sequence cut short, then 'A'
		"\xed\xa0\x80": 65533,   // an encoded surrogate (CESU-8)
		"\xf0\x9f\x98": 65533,   // a 4-byte sequence cut short at the end
		"\xe2\x82":     65533,
		"\xffA":        2031588, // agrees already
	} {
		if got := javaStringHash(in) & 0x7fffffff; got != java {
			t.Errorf("javaStringHash(%q) = %d, Java says %d", in, got, java)
		}
	}
}
