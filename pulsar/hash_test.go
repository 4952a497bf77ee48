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
	if p := Murmur3_32Hash.partition("hello", 7); p != int((0x248bfa47&0x7fffffff)%7) {
		t.Fatalf("murmur partition = %d", p)
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
