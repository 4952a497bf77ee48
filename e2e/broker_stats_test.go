package e2e

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// topicStats is the part of the admin API's topic stats the tests read.
type topicStats struct {
	Publishers []struct {
		ProducerName string `json:"producerName"`
	} `json:"publishers"`
	Subscriptions map[string]subscriptionStats `json:"subscriptions"`
}

// subscriptionStats is one subscription of topicStats.
type subscriptionStats struct {
	MsgOutCounter int64 `json:"msgOutCounter"`
	MsgBacklog    int64 `json:"msgBacklog"`
	Consumers     []struct {
		ConsumerName     string `json:"consumerName"`
		AvailablePermits int64  `json:"availablePermits"`
	} `json:"consumers"`
}

// getTopicStats is the broker's stats of topic; a body that does not parse fails the test.
func getTopicStats(t testing.TB, b *broker.Broker, topic string) topicStats {
	t.Helper()
	out := b.MustAdmin(t, http.MethodGet, adminTopicPath(topic)+"/stats", nil)
	var s topicStats
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("topic stats of %s: %v: %s", topic, err, out)
	}
	return s
}

// getSubscriptionStats is the broker's stats of subscription sub on topic. A subscription
// the broker does not list fails the test: its counters would read as zero and pass any
// check that the broker stopped sending or that nothing is left.
func getSubscriptionStats(t testing.TB, b *broker.Broker, topic, sub string) subscriptionStats {
	t.Helper()
	st := getTopicStats(t, b, topic)
	s, ok := st.Subscriptions[sub]
	if !ok {
		names := make([]string, 0, len(st.Subscriptions))
		for n := range st.Subscriptions {
			names = append(names, n)
		}
		t.Fatalf("the broker lists no subscription %s on %s (it lists %v)", sub, topic, names)
	}
	return s
}
