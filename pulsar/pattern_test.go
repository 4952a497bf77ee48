package pulsar

import (
	"errors"
	"strings"
	"testing"
)

// The Java client matches a pattern against the whole name without its scheme and
// without the partition suffix; the official Go client matches a prefix of the whole
// name, so "orders" matched "orders-archive" and a partition's own name.
func TestTopicsPatternMatchesAsTheJavaClient(t *testing.T) {
	p, err := ParseTopicsPattern("persistent://tenant/ns/orders-.*")
	if err != nil {
		t.Fatal(err)
	}
	exact, err := ParseTopicsPattern("persistent://tenant/ns/orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pat   *TopicsPattern
		topic string
		want  bool
	}{
		{p, "persistent://tenant/ns/orders-eu", true},
		{p, "persistent://tenant/ns/orders-eu-partition-3", true},
		{p, "persistent://tenant/ns/eu-orders-x", false},           // whole name, not a search
		{p, "persistent://tenant/other/orders-eu", false},          // another namespace
		{p, "non-persistent://tenant/ns/orders-eu", false},         // not persistent
		{p, "persistent://tenant/ns/orders-__change_events", true}, // a user topic with underscores
		{exact, "persistent://tenant/ns/orders", true},
		{exact, "persistent://tenant/ns/orders-partition-0", true}, // a partition of it
		{exact, "persistent://tenant/ns/orders-archive", false},
		{exact, "persistent://tenant/ns/orders-partition-x", false},
	} {
		if got := tc.pat.Matches(tc.topic); got != tc.want {
			t.Errorf("%s matches %s = %v, want %v", tc.pat, tc.topic, got, tc.want)
		}
	}
	all, err := ParseTopicsPattern("persistent://tenant/ns/.*")
	if err != nil {
		t.Fatal(err)
	}
	for _, sys := range []string{
		"persistent://tenant/ns/__change_events",
		"persistent://tenant/ns/__change_events-partition-0",
		"persistent://tenant/ns/__transaction_buffer_snapshot",
		"persistent://tenant/ns/orders-sub-__transaction_pending_ack",
	} {
		if all.Matches(sys) {
			t.Errorf("%s matches the system topic %s", all, sys)
		}
	}
}

func TestParseTopicsPatternNamesWhatIsWrong(t *testing.T) {
	for _, bad := range []string{
		"tenant/ns/orders-.*",              // no scheme
		"non-persistent://tenant/ns/x.*",   // not persistent
		"persistent://tenant/ns",           // no topic part
		"persistent://tenant/n.*/orders",   // namespace not literal
		"persistent://tenant/ns/orders-(",  // does not compile
		"persistent://te[n]ant/ns/orders-", // tenant not literal
	} {
		_, err := ParseTopicsPattern(bad)
		if !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("ParseTopicsPattern(%q) = %v, want ErrInvalidTopic", bad, err)
			continue
		}
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseTopicsPattern(%q)'s error %q does not name the pattern", bad, err)
		}
	}
}

// The hash is the broker's (Guava's CRC32C over the sorted names joined by commas,
// printed lowest byte first): "34457827" is what Guava 32.1.2 prints for these two.
func TestTopicsHashIsTheBrokers(t *testing.T) {
	if got := topicsHash([]string{"persistent://a/b/y", "persistent://a/b/x"}); got != "34457827" {
		t.Fatalf("topicsHash = %s, want Guava's 34457827", got)
	}
}
