package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// publishPoison publishes n unbatched messages {"seq":i,"poison":...}, poison for the
// sequence numbers in poison, keyed and with properties, and returns nothing: the test
// reads them back by seq.
func publishPoison(t testing.TB, b *broker.Broker, topic string, n int, poison map[int]bool) {
	t.Helper()
	c := newOfficialClient(t, b)
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range n {
		payload := fmt.Sprintf(`{"seq":%d,"poison":%v}`, i, poison[i])
		if _, err := p.Send(context.Background(), &official.ProducerMessage{Payload: []byte(payload), Key: fmt.Sprintf("k%d", i),
			Properties: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// retryEnvelope is what the tests read of a JSON-envelope record.
type retryEnvelope struct {
	MessageID       string            `json:"messageId"`
	Key             string            `json:"key"`
	Properties      map[string]string `json:"properties"`
	RedeliveryCount int               `json:"redeliveryCount"`
	Payload         struct {
		Seq    int
		Poison bool
	}
	at time.Time
}

// subscriptionBacklog is the subscription's backlog on topic, from the broker's stats.
func subscriptionBacklog(t testing.TB, b *broker.Broker, topic, sub string) int64 {
	t.Helper()
	raw := b.MustAdmin(t, http.MethodGet, "/admin/v2/"+strings.Replace(topic, "://", "/", 1)+"/stats", nil)
	var st struct {
		Subscriptions map[string]struct {
			MsgBacklog int64 `json:"msgBacklog"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("stats of %s: %v: %s", topic, err, raw)
	}
	s, ok := st.Subscriptions[sub]
	if !ok {
		t.Fatalf("no subscription %s on %s: %s", sub, topic, raw)
	}
	return s.MsgBacklog
}

// TestEgressNackRedeliversWithGrowingBackoff: a client nacks every message whose payload
// says poison until it has seen it four times, and acks the rest. The others are
// delivered once each; each poison message comes back with its redelivery count up by
// one each time, never before the backoff (initial 1 s × 1.6 per attempt, -20 % jitter)
// has passed; in the end nothing is left in the subscription's backlog.
func TestEgressNackRedeliversWithGrowingBackoff(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "nack")
	poison := map[int]bool{3: true, 7: true}
	const n, attempts = 10, 4
	publishPoison(t, b, topic, n, poison)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    envelope: json
    retry: {initial: 1s, multiplier: 1.6, jitter: 0.2, max: 120s}
`, b.URL, topic))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	seen := map[int][]retryEnvelope{}
	done := 0 // messages settled for good: acked
	for done < n {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("after %d messages settled: %v (seen %v)", done, err, seen)
		}
		var e retryEnvelope
		if err := json.Unmarshal(rec, &e); err != nil {
			t.Fatalf("%q: %v", rec, err)
		}
		e.at = time.Now()
		seq := e.Payload.Seq
		seen[seq] = append(seen[seq], e)
		endpoint := "/ack"
		if e.Payload.Poison && len(seen[seq]) < attempts {
			endpoint = "/nack"
		} else {
			done++
		}
		js, _ := json.Marshal([]string{e.MessageID})
		if st, m := postAck(t, p.DataURL+"/v1/streams/out"+endpoint, sid, "application/json", js); st != 200 {
			t.Fatalf("POST %s %s: %d %v", endpoint, e.MessageID, st, m)
		}
	}
	for seq := range n {
		got := seen[seq]
		if !poison[seq] {
			if len(got) != 1 || got[0].RedeliveryCount != 0 {
				t.Errorf("seq %d delivered %d times: %+v", seq, len(got), got)
			}
			continue
		}
		if len(got) != attempts {
			t.Fatalf("poison seq %d delivered %d times, want %d", seq, len(got), attempts)
		}
		var gaps []string
		for i := 1; i < attempts; i++ {
			if got[i].RedeliveryCount != i {
				t.Errorf("poison seq %d, delivery %d: redeliveryCount %d", seq, i+1, got[i].RedeliveryCount)
			}
			// The backoff before delivery i+1 is 1 s × 1.6^(i-1), less 20 % at most.
			min := time.Duration(float64(time.Second) * pow(1.6, i-1) * 0.8)
			gap := got[i].at.Sub(got[i-1].at)
			if gap < min {
				t.Errorf("poison seq %d came back %v after delivery %d, before its backoff's lower bound %v", seq, gap, i, min)
			}
			gaps = append(gaps, gap.Round(10*time.Millisecond).String())
		}
		t.Logf("poison seq %d: delivered %d times, gaps %v (backoff 1s, 1.6s, 2.56s ±20%%)", seq, attempts, gaps)
	}
	// Every message, poison included, was acknowledged in the end: nothing is left.
	deadline := time.Now().Add(30 * time.Second)
	for subscriptionBacklog(t, b, topic, "bridge-out") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d after every message was acknowledged", subscriptionBacklog(t, b, topic, "bridge-out"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}
