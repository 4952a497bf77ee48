package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// mesosFilterEvent is the i-th event of the filter test: JSON or protobuf (a
// mesos.v1.scheduler.Event), of one of three types, from one of three agents.
func mesosFilterEvent(i int) (payload []byte, typ, agent string) {
	types := []struct {
		name string
		num  uint64
	}{{"UPDATE", 4}, {"HEARTBEAT", 8}, {"OFFERS", 2}}
	ty := types[i%3]
	agent = fmt.Sprintf("a%d", (i/3)%3)
	if i%2 == 0 {
		return []byte(fmt.Sprintf(`{"type":%q,"seq":%d}`, ty.name, i)), ty.name, agent
	}
	return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), ty.num), ty.name, agent
}

// TestEgressFilterDeliversExactlyWhatMatchesOfAMixedMesosStream: JSON and protobuf Mesos
// events on one topic, published one per entry and in batches of 10 (the official
// client's batching producer); the stream keeps UPDATE events (a json and a proto
// alternative) and anything from agent a1 (a property). The records delivered are
// exactly the messages the test's own evaluation of the same conditions keeps, each
// once, and every other message is acknowledged: the subscription's backlog reaches 0.
func TestEgressFilterDeliversExactlyWhatMatchesOfAMixedMesosStream(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "filter")
	const n = 600
	want := map[string]bool{}
	c := newOfficialClient(t, b)
	single, err := c.CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	batched, err := c.CreateProducer(official.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer batched.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		payload, typ, agent := mesosFilterEvent(i)
		if typ == "UPDATE" || agent == "a1" {
			want[strconv.Itoa(i)] = true
		}
		p := single
		if (i/50)%2 == 1 {
			p = batched
		}
		p.SendAsync(ctx, &official.ProducerMessage{Payload: payload, Properties: map[string]string{"seq": strconv.Itoa(i), "agent": agent}},
			func(_ official.MessageID, _ *official.ProducerMessage, err error) { errs <- err })
	}
	if err := batched.FlushWithCtx(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: events
    topics: [%s]
    subscription: filtered
    position: earliest
    envelope: json
    filter:
      schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
      match:
        - json: {type: UPDATE}
        - proto: {type: UPDATE}
        - properties: {agent: a1}
`, b.URL, topic))
	gctx, gcancel := context.WithCancel(context.Background())
	defer gcancel()
	resp := egressGet(t, gctx, p.DataURL+"/v1/streams/events", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %d", resp.StatusCode)
	}
	recs := make(chan []byte, n)
	go func() {
		defer close(recs)
		rd := recordio.NewReader(resp.Body)
		for {
			rec, err := rd.Next()
			if err != nil {
				return
			}
			recs <- bytes.Clone(rec)
		}
	}()
	got := map[string]int{}
	inBatch := 0 // delivered with a batch index
	take := func(rec []byte) {
		var e struct {
			MessageID     string            `json:"messageId"`
			Properties    map[string]string `json:"properties"`
			Payload       json.RawMessage   `json:"payload"`
			PayloadBase64 []byte            `json:"payloadBase64"`
		}
		if err := json.Unmarshal(rec, &e); err != nil {
			t.Fatalf("%q: %v", rec, err)
		}
		seq := e.Properties["seq"]
		i, _ := strconv.Atoi(seq)
		sent, _, _ := mesosFilterEvent(i)
		payload := e.PayloadBase64
		if e.Payload != nil {
			payload = e.Payload
		}
		if !bytes.Equal(payload, sent) {
			t.Fatalf("message %s delivered as %q, published as %q", seq, payload, sent)
		}
		got[seq]++
		if !strings.HasSuffix(e.MessageID, ":-1") {
			inBatch++
		}
	}
	deadline := time.After(time.Minute)
	for len(got) < len(want) {
		select {
		case rec := <-recs:
			take(rec)
		case <-deadline:
			t.Fatalf("%d of the %d messages the filter keeps delivered in a minute", len(got), len(want))
		}
	}
	// Once the backlog is 0 every message was either written (and acknowledged after
	// its flush) or filtered out (acknowledged unseen): nothing more can come.
	until := time.Now().Add(30 * time.Second)
	for subscriptionBacklog(t, b, topic, "filtered") != 0 {
		if time.Now().After(until) {
			t.Fatalf("backlog %d after the kept messages were delivered: the filtered ones were not all acknowledged", subscriptionBacklog(t, b, topic, "filtered"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	gcancel()
	resp.Body.Close()
	for rec := range recs {
		take(rec)
	}
	var extra, twice []string
	for seq, k := range got {
		if !want[seq] {
			extra = append(extra, seq)
		}
		if k > 1 {
			twice = append(twice, seq)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 || len(twice) > 0 || len(got) != len(want) {
		t.Fatalf("delivered %d, want %d; not kept by the filter yet delivered: %v; delivered twice: %v", len(got), len(want), extra, twice)
	}
	var m string
	if mresp, err := http.Get(p.OpsURL + "/metrics"); err == nil {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(mresp.Body)
		mresp.Body.Close()
		m = buf.String()
	}
	line := fmt.Sprintf(`bridge_egress_filtered_total{stream="events"} %d`, n-len(want))
	if !strings.Contains(m, line) {
		t.Fatalf("metrics lack %q", line)
	}
	if inBatch == 0 || inBatch == len(got) {
		t.Fatalf("%d of %d records delivered from batches: want both batched and single messages", inBatch, len(got))
	}
	t.Logf("%d messages (JSON and protobuf, half in batches of 10): %d delivered (%d from batches), each once, exactly the kept set; %d filtered, acknowledged (backlog 0)",
		n, len(got), inBatch, n-len(want))
}
