package pulsar

import "testing"

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
