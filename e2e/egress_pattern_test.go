package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/javapeer"
	"github.com/recordio-bridge/bridge/recordio"
)

// patternPayload names its topic, its round and its number, so a record says where it
// was published.
func patternPayload(topic, round string, i int) string {
	return fmt.Sprintf(`{"topic":%q,"round":%q,"i":%d}`, topic, round, i)
}

// publishPattern publishes n messages to topic (a partition's own name publishes to that
// partition) with the official client and returns their payloads.
func publishPattern(t testing.TB, c official.Client, topic, round string, n int) []string {
	t.Helper()
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer on %s: %v", topic, err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([]string, n)
	for i := range n {
		out[i] = patternPayload(topic, round, i)
		if _, err := p.Send(ctx, &official.ProducerMessage{Payload: []byte(out[i]), Key: fmt.Sprint(i)}); err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
	}
	return out
}

// patternReader collects the records of a stream as they come.
type patternReader struct {
	mu   sync.Mutex
	seen map[string]int // payload -> deliveries
	err  error
	done chan struct{}
}

func readPattern(rd *recordio.Reader) *patternReader {
	r := &patternReader{seen: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			rec, err := rd.Next()
			r.mu.Lock()
			if err != nil {
				r.err = err
				r.mu.Unlock()
				return
			}
			r.seen[string(rec)]++
			r.mu.Unlock()
		}
	}()
	return r
}

// await waits until every payload of want was delivered.
func (r *patternReader) await(t testing.TB, what string, want []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r.mu.Lock()
		var missing []string
		for _, w := range want {
			if r.seen[w] == 0 {
				missing = append(missing, w)
			}
		}
		err := r.err
		r.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if err != nil {
			t.Fatalf("%s: the stream ended (%v) with %d of %d records missing, first %s", what, err, len(missing), len(want), missing[0])
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d records not delivered within %s, first %s", what, len(missing), len(want), within, missing[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// topics returns the topics (partitions by their own name) of the records delivered
// of round, and every topic of a record delivered at all.
func (r *patternReader) topics(round string) (ofRound, all map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ofRound, all = map[string]bool{}, map[string]bool{}
	for p := range r.seen {
		var topic, rd string
		fmt.Sscanf(strings.NewReplacer(`{"topic":`, "", `,"round":`, " ", `,"i":`, " ", `"`, "").Replace(p), "%s %s", &topic, &rd)
		all[topic] = true
		if rd == round {
			ofRound[topic] = true
		}
	}
	return ofRound, all
}

// patternMetric reads series name with the given labels (in any order) from /metrics.
func patternMetric(t testing.TB, opsURL, name string, labels ...string) (float64, bool) {
	t.Helper()
	for _, l := range strings.Split(scrape(t, opsURL), "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		ok := true
		for _, lb := range labels {
			ok = ok && strings.Contains(l, lb)
		}
		if ok {
			var v float64
			f := strings.Fields(l)
			fmt.Sscan(f[len(f)-1], &v)
			return v, true
		}
	}
	return 0, false
}

// TestEgressPatternStreamFollowsTopicsAcrossRestartAndUnload: a topicsPattern stream
// reads every message of every topic its pattern matches while topics (partitioned and
// not) are created and deleted, partitions are added, the broker is restarted and the
// namespace unloaded, none of a topic it does not match (another prefix, the pattern's
// text in the middle of a name), and the one response goes on throughout. At the end,
// the topics it reads are those the Java client's pattern consumer reads on the same
// pattern. On a broker with enableBrokerSideSubscriptionPatternEvaluation=false (run
// with PULSAR_EXTRA_CONF=e2e/pulsar/pattern-polling.conf) it discovers by listing the
// namespace, and the test checks that it did.
func TestEgressPatternStreamFollowsTopicsAcrossRestartAndUnload(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("the broker at PULSAR_URL was not started by pulsar.sh; this test restarts its broker")
	}
	ns := b.Namespace(t, "pattern")
	topic := func(name string) string { return "persistent://" + ns + "/" + name }
	pattern := topic("orders-.*")
	admin := func(method, name, suffix string, body []byte) {
		b.MustAdmin(t, method, "/admin/v2/persistent/"+ns+"/"+name+suffix, body)
	}
	c := newOfficialClient(t, b)

	// Before the stream: a plain topic, a partitioned one, and two the pattern must not match.
	admin(http.MethodPut, "orders-a", "", nil)
	b.CreatePartitionedTopic(t, topic("orders-p"), 2)
	admin(http.MethodPut, "audit-x", "", nil)
	admin(http.MethodPut, "x-orders-y", "", nil)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: pat
    topicsPattern: %s
    position: latest
    discoveryInterval: 2s
`, b.URL, pattern))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/pat", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET the pattern stream: %s", resp.Status)
	}
	r := readPattern(recordio.NewReader(resp.Body))
	// The stream starts at the latest message of the topics matched when it starts (its
	// subscription exists once the response has begun); topics found later are read
	// from their first message (newTopicsPosition: earliest, the default).
	var want []string
	for _, name := range []string{"orders-a", "orders-p"} {
		want = append(want, publishPattern(t, c, topic(name), "start", 10)...)
	}
	stray := append(publishPattern(t, c, topic("audit-x"), "start", 5), publishPattern(t, c, topic("x-orders-y"), "start", 5)...)
	r.await(t, "the topics matched at the start", want, time.Minute)

	// Watching, or polling on a broker without watchers.
	polling := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		if v, _ := patternMetric(t, p.OpsURL, "bridge_egress_pattern_discovery", `state="watching"`, `stream="pat"`); v == 1 {
			break
		}
		if v, _ := patternMetric(t, p.OpsURL, "bridge_egress_pattern_discovery", `state="polling"`, `stream="pat"`); v == 1 {
			polling = true
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bridge_egress_pattern_discovery shows the stream neither watching nor polling")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The polling run's broker is started with pattern-polling.conf (make e2e).
	if want := strings.Contains(os.Getenv("PULSAR_EXTRA_CONF"), "pattern-polling"); polling != want {
		t.Fatalf("bridge_egress_pattern_discovery: polling %v on a broker started with PULSAR_EXTRA_CONF=%q", polling, os.Getenv("PULSAR_EXTRA_CONF"))
	}

	// Created while the stream runs, published to at once: read from their first message.
	admin(http.MethodPut, "orders-new", "", nil)
	b.CreatePartitionedTopic(t, topic("orders-np"), 3)
	created := append(publishPattern(t, c, topic("orders-new"), "created", 10), publishPattern(t, c, topic("orders-np"), "created", 12)...)
	r.await(t, "topics created while the stream runs", created, time.Minute)

	// A broker restart: the stream goes on, and a topic created after it is found.
	b.Restart(t)
	admin(http.MethodPut, "orders-restart", "", nil)
	var afterRestart []string
	for _, name := range []string{"orders-a", "orders-p", "orders-new", "orders-np", "orders-restart"} {
		afterRestart = append(afterRestart, publishPattern(t, c, topic(name), "restart", 5)...)
	}
	r.await(t, "after the broker restart", afterRestart, 2*time.Minute)

	// A namespace unload: every topic moves; a topic created after it is found.
	b.MustAdmin(t, http.MethodPut, "/admin/v2/namespaces/"+ns+"/unload", nil)
	admin(http.MethodPut, "orders-unload", "", nil)
	var afterUnload []string
	for _, name := range []string{"orders-a", "orders-p", "orders-np", "orders-unload"} {
		afterUnload = append(afterUnload, publishPattern(t, c, topic(name), "unload", 5)...)
	}
	r.await(t, "after the namespace unload", afterUnload, 2*time.Minute)

	// Deletions (plain and partitioned) and a partition added to a matched topic.
	admin(http.MethodDelete, "orders-a", "?force=true", nil)
	admin(http.MethodDelete, "orders-np", "/partitions?force=true", nil)
	admin(http.MethodPost, "orders-p", "/partitions", []byte("3"))
	grown := publishPattern(t, c, topic("orders-p-partition-2"), "grown", 5)
	r.await(t, "the partition added to a matched topic", grown, 2*time.Minute)

	// The last round: every topic that still exists.
	final := map[string]bool{}
	var last []string
	for _, name := range []string{"orders-p", "orders-new", "orders-restart", "orders-unload"} {
		last = append(last, publishPattern(t, c, topic(name), "final", 6)...)
	}
	r.await(t, "the last round", last, time.Minute)
	ofFinal, all := r.topics("final")
	for tp := range ofFinal {
		final[tp] = true
	}
	for _, s := range stray {
		r.mu.Lock()
		n := r.seen[s]
		r.mu.Unlock()
		if n > 0 {
			t.Fatalf("the stream delivered %s, of a topic the pattern does not match", s)
		}
	}
	for tp := range all {
		if !strings.Contains(tp, "/orders-") {
			t.Fatalf("the stream delivered a record of %s", tp)
		}
	}
	if v, ok := patternMetric(t, p.OpsURL, "bridge_egress_pattern_topics_removed_total", `stream="pat"`); !ok || v < 2 {
		t.Fatalf("bridge_egress_pattern_topics_removed_total = %v (%v); want the two deleted topics", v, ok)
	}
	if v, ok := patternMetric(t, p.OpsURL, "bridge_egress_pattern_topics", `stream="pat"`); !ok || v != 4 {
		t.Fatalf("bridge_egress_pattern_topics = %v (%v); want 4 (orders-p, -new, -restart, -unload)", v, ok)
	}

	// The oracle: the Java client's pattern consumer on the same pattern reads the same
	// topics (partitions by their own names) from their start.
	msgs, _ := javapeer.Consume(t, javapeer.Spec{URL: b.URL, TopicsPattern: pattern, Subscription: broker.Name("java-oracle"),
		Position: "Earliest", TimeoutMs: 5000, Ack: "all"})
	java := map[string]bool{}
	for _, m := range msgs {
		java[m.Topic] = true
	}
	// The bridge's last round covers the partitions it published to; the Java client's
	// set is every partition of the topics it reads (it reads their whole history).
	bridgeTopics := topicsOf(final)
	javaTopics := topicsOf(java)
	if !slices.Equal(bridgeTopics, javaTopics) {
		t.Fatalf("the bridge reads the topics %v; the Java client's pattern consumer reads %v", bridgeTopics, javaTopics)
	}
	t.Logf("pattern %s (polling=%v): %d distinct records delivered over creation, restart, unload, deletion and growth; the topics read at the end are the Java client's: %v",
		pattern, polling, len(r.seen), javaTopics)
}

// topicsOf returns the sorted topics of a set of topic or partition names.
func topicsOf(names map[string]bool) []string {
	set := map[string]bool{}
	for n := range names {
		if i := strings.LastIndex(n, "-partition-"); i > 0 {
			n = n[:i]
		}
		set[n] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
