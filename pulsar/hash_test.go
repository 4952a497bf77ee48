package pulsar

import (
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestHashes(t *testing.T) {
	// Java's "hello".hashCode() is 99162322; murmur3_32("hello", seed 0) is 0x248bfa47.
	if got := javaStringHash("hello"); got != 99162322 {
		t.Fatalf("javaStringHash(hello) = %d", got)
	}
	for in, want := range map[string]uint32{"": 0, "hello": 0x248bfa47, "The quick brown fox jumps over the lazy dog": 0x2e4ff723} {
		if got := murmur3(in); got != want {
			t.Fatalf("murmur3(%q) = %#x, want %#x", in, got, want)
		}
	}
	if p := Murmur3_32Hash.Partition("hello", 7); p != int((0x248bfa47&0x7fffffff)%7) {
		t.Fatalf("murmur partition = %d", p)
	}
}

// The keys' hashes and partitions as the Java client of Apache Pulsar 4.0.8 computes
// them (JavaStringHash.getInstance().makeHash, Murmur3Hash32.getInstance().makeHash, and
// the router's signSafeMod over 3 and 7 partitions), printed by a jshell-sized program
// against the distribution's lib/*.jar.
func TestKeysGoToThePartitionsTheJavaClientChooses(t *testing.T) {
	for _, tc := range []struct {
		key              string
		java, murmur     int32
		javaIn3, javaIn7 int
	}{
		{"", 0, 0, 0, 0},
		{"hello", 99162322, 613153351, 1, 0},
		{"task-000123", 778861386, 2016335067, 0, 2},
		{"agent-42.example.internal", 973718889, 1210934865, 0, 3},
		{"The quick brown fox jumps over the lazy dog", 1538055507, 776992547, 0, 2},
		{"\U000000fcmlaut-\U0000043a\U0000043b\U0000044e\U00000447", 1966577730, 185893157, 0, 5},
		{"\U0001f600emoji", 913791171, 1391726296, 0, 6},
		{"framework/7f3c9e2a-1b4d-4e8f-9a0b-123456789abc", 380950684, 1420802112, 1, 2},
	} {
		if got := int32(javaStringHash(tc.key) & 0x7fffffff); got != tc.java {
			t.Errorf("JavaStringHash(%q) = %d, Java says %d", tc.key, got, tc.java)
		}
		if got := int32(murmur3(tc.key) & 0x7fffffff); got != tc.murmur {
			t.Errorf("Murmur3_32Hash(%q) = %d, Java says %d", tc.key, got, tc.murmur)
		}
		if got := JavaStringHash.Partition(tc.key, 3); got != tc.javaIn3 {
			t.Errorf("partition of %q among 3 = %d, Java says %d", tc.key, got, tc.javaIn3)
		}
		if got := JavaStringHash.Partition(tc.key, 7); got != tc.javaIn7 {
			t.Errorf("partition of %q among 7 = %d, Java says %d", tc.key, got, tc.javaIn7)
		}
		if got, want := Murmur3_32Hash.Partition(tc.key, 7), int(tc.murmur%7); got != want {
			t.Errorf("murmur partition of %q among 7 = %d, Java says %d", tc.key, got, want)
		}
	}
}

// Java decodes a key's bytes (new String(bytes, UTF_8)) before hashing it, replacing each
// ill-formed subpart, not each invalid byte, by one U+FFFD, and an encoded surrogate by
// one U+FFFD. The values are what OpenJDK 17 prints for
// JavaStringHash.getInstance().makeHash(new String(bytes, UTF_8)) with the Java client
// of Apache Pulsar 4.0.8.
var javaHashesOfInvalidUTF8 = []struct {
	key  string
	java uint32
}{
	{"\xe2\x82A", 2031588},                             // a 3-byte sequence cut short by 'A'
	{"\xe2\x82", 65533},                                // a 3-byte sequence cut short by the end
	{"\xf0\x9f\x98", 65533},                            // a 4-byte sequence cut short by the end
	{"\xf0\x9f\x98A", 2031588},                         // a 4-byte sequence cut short by 'A'
	{"\xf0\x9fA", 2031588},                             // a 4-byte sequence cut short after two bytes
	{"\xf0A", 2031588},                                 // a 4-byte lead then 'A'
	{"\xf0", 65533},                                    // a lone 4-byte lead at the end
	{"\xe2", 65533},                                    // a lone 3-byte lead at the end
	{"\xc3", 65533},                                    // a lone 2-byte lead at the end
	{"\xc3A", 2031588},                                 // a 2-byte lead then 'A'
	{"\xc3\xa9", 233},                                  // a well-formed 2-byte sequence
	{"\xe2\x82\xac", 8364},                             // a well-formed 3-byte sequence
	{"\xf0\x9f\x98\x80", 1772899},                      // a well-formed 4-byte sequence, two UTF-16 units
	{"\xed\xa0\x80", 65533},                            // an encoded high surrogate, one replacement in Java
	{"\xed\xbf\xbf", 65533},                            // an encoded low surrogate
	{"\xed\xa0\xbd\xed\xb8\x80", 2097056},              // a CESU-8 surrogate pair, two replacements
	{"\xed\x9f\xbf", 55295},                            // the last code point below the surrogates
	{"\xed\xa0A", 2031588},                             // ED A0 cut short, one subpart in Java
	{"\xed\xa0", 65533},                                // ED A0 at the end
	{"\xed\x80A", 2031588},                             // ED 80 cut short
	{"\xe0\x80\x80", 65074269},                         // an overlong 3-byte NUL, three replacements
	{"\xe0\x9f\x80", 65074269},                         // E0 then 9F: below A0, three
	{"\xe0\xa0\x80", 2048},                             // E0 A0 80: the lowest 3-byte sequence
	{"\xe0\xa0A", 2031588},                             // E0 A0 cut short
	{"\xf0\x80\x80\x80", 2017367872},                   // an overlong 4-byte NUL, four
	{"\xf0\x8f\x80\x80", 2017367872},                   // F0 8F: below 90, four
	{"\xf0\x90\x80\x80", 1770496},                      // F0 90 80 80: the lowest 4-byte sequence
	{"\xf4\x8f\xbf\xbf", 1803232},                      // the last code point
	{"\xf4\x90\x80\x80", 2017367872},                   // F4 90: above U+10FFFF, four
	{"\xf4\x8fA", 2031588},                             // F4 8F cut short
	{"\xc0\x80", 2097056},                              // an overlong C0 80, two
	{"\xc1\xbf", 2097056},                              // an overlong C1 BF, two
	{"\xf5\x80\x80\x80", 2017367872},                   // F5, four
	{"\xf8", 65533},                                    // F8
	{"\xfe", 65533},                                    // FE
	{"\xffA", 2031588},                                 // FF then 'A'
	{"\x80", 65533},                                    // a stray continuation byte
	{"\xbf\xbfA", 65008801},                            // two stray continuation bytes then 'A'
	{"A\xe2\x82B", 2094054},                            // ASCII, a cut-short sequence, ASCII
	{"\xe2\x82\xe2\x82\xac", 2039887},                  // a cut-short sequence then a well-formed one
	{"\xf0\x9f\x98\xf0\x9f\x98\x80", 64750112},         // a cut-short 4-byte sequence then a well-formed one
	{"\x7fLwbT\x22+", 1185049957},                      // random bytes
	{"G\xa5\x13\xe8Y1\x9bT", 604813903},                // random bytes
	{"\x81\xca\xef6\xba\xe1\x0e\x88\x9f]", 1392499272}, // random bytes
	{"\x11\xcc\xae[\x9c\xfa=O\xc0\xa5\xcb", 250849101}, // random bytes
	{"kX\x8a\xce\xd3wA", 1104845466},                   // random bytes
	{"\xed\x17s\xa0;(\xa5c\xaa", 628058534},            // random bytes
}

func TestJavaStringHashReplacesEachIllFormedSubpartAsJavasDecoderDoes(t *testing.T) {
	for _, tc := range javaHashesOfInvalidUTF8 {
		if got := javaStringHash(tc.key) & 0x7fffffff; got != tc.java {
			t.Errorf("javaStringHash(%q) = %d, Java says %d", tc.key, got, tc.java)
		}
		if got := javaHashReference(tc.key) & 0x7fffffff; got != tc.java {
			t.Errorf("javaHashReference(%q) = %d, Java says %d", tc.key, got, tc.java)
		}
	}
}

func TestJavaStringHashDoesNotAllocate(t *testing.T) {
	for _, key := range []string{"task-000123", "\U0001f600emoji", "\xe2\x82A\xed\xa0\x80"} {
		if n := testing.AllocsPerRun(100, func() { javaStringHash(key) }); n != 0 {
			t.Errorf("javaStringHash(%q) allocates %v times", key, n)
		}
	}
}

// FuzzJavaStringHashMatchesReference checks javaStringHash against javaHashReference, a
// slow spelling-out of the same decoding on top of unicode/utf8.
func FuzzJavaStringHashMatchesReference(f *testing.F) {
	for _, tc := range javaHashesOfInvalidUTF8 {
		f.Add([]byte(tc.key))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := javaStringHash(string(b)), javaHashReference(string(b)); got != want {
			t.Errorf("javaStringHash(%q) = %d, reference says %d", b, got, want)
		}
	})
}

// javaHashReference is Java's String.hashCode of s decoded as Java decodes UTF-8, the
// slow way: at each position the longest run of up to four bytes that is one character
// (a three-byte encoded surrogate counting as U+FFFD) is that character; failing one,
// the longest run that more bytes could complete into a character is one U+FFFD;
// failing that, the byte is.
func javaHashReference(s string) uint32 {
	var units []uint16
	for i := 0; i < len(s); {
		n, r := 1, rune(utf8.RuneError)
		for k := min(4, len(s)-i); k >= 1; k-- {
			if c, ok := referenceCharacter(s[i : i+k]); ok {
				n, r = k, c
				break
			}
			if referenceCompletable(s[i : i+k]) {
				n = k
				break
			}
		}
		units = append(units, utf16.Encode([]rune{r})...)
		i += n
	}
	var h uint32
	for _, u := range units {
		h = 31*h + uint32(u)
	}
	return h
}

// referenceCharacter says whether p is exactly one character to Java's decoder.
func referenceCharacter(p string) (rune, bool) {
	if len(p) == 3 && p[0] == 0xed && p[1] >= 0xa0 && p[1] <= 0xbf && p[2]&0xc0 == 0x80 {
		return utf8.RuneError, true
	}
	r, size := utf8.DecodeRuneInString(p)
	if size != len(p) || r == utf8.RuneError && size == 1 {
		return 0, false
	}
	return r, true
}

// referenceCompletable says whether continuation bytes appended to p make one character.
func referenceCompletable(p string) bool {
	if len(p) >= 4 {
		return false
	}
	for _, c := range []string{"\x80", "\x90", "\xa0", "\xbf"} {
		if _, ok := referenceCharacter(p + c); ok || referenceCompletable(p+c) {
			return true
		}
	}
	return false
}

func TestTopicName(t *testing.T) {
	for in, want := range map[string]string{
		"t":                      "persistent://public/default/t",
		"a/b/t":                  "persistent://a/b/t",
		"persistent://a/b/t":     "persistent://a/b/t",
		"non-persistent://a/b/t": "non-persistent://a/b/t",
	} {
		if got, err := TopicName(in); err != nil || got != want {
			t.Errorf("TopicName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a/t", "a//t", "http://a/b/t", "persistent://a/b", "/a/b"} {
		if _, err := TopicName(bad); err == nil {
			t.Errorf("TopicName(%q) accepted", bad)
		}
	}
}

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := Backoff{Initial: 100e6, Multiplier: 2, Jitter: 0.1, Max: 1e9}.withDefaults()
	if d := b.delay(0); d < 90e6 || d > 110e6 {
		t.Fatalf("first delay %v", d)
	}
	if d := b.delay(20); d < 900e6 || d > 1100e6 {
		t.Fatalf("capped delay %v", d)
	}
}
