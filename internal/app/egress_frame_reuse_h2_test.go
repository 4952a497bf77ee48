package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestEgressEnvelopesFiltersAndRedeliveriesReadIntactRecordsOverHTTP2: what the frame
// reuse test does not take is taken here, over HTTP/2 (h2c), with released frames
// poisoned: JSON envelopes of batched messages a payload filter half leaves out (each
// filtered message settled before its siblings are written), records of 40 KiB written
// through from frames of their own (as a Body, base64 in the envelope), and an ack=client
// stream whose held batch comes again (a redelivery superseding every record held: the
// first copies are released unacknowledged) and whose records are then negatively
// acknowledged at maxDeliveries, so dead-lettered after the stream wrote them.
func TestEgressEnvelopesFiltersAndRedeliveriesReadIntactRecordsOverHTTP2(t *testing.T) {
	defer pulsartest.PoisonReleasedFrames(pulsartest.PoisonReleasedFrames(true))
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	writeConfig(t, path, b.URL(), `streams:
  - name: j
    topics: [h2-json]
    envelope: json
    filter:
      match:
        - json: {kind: [keep]}
  - name: c
    topics: [h2-client]
    subscription: c
    type: shared
    ack: client
    envelope: json
    maxUnacked: 100000
    retry: {initial: 10ms, max: 10ms, maxDeliveries: 1, deadLetterTopic: h2-dlq}
`)
	a, err := New(Options{ConfigPath: path, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	base := "http://" + a.DataAddr().String() + "/v1/streams/"
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	// payload is message i of tag, a JSON object of about size bytes; every other one is
	// kept by stream j's filter.
	payload := func(tag string, i, size int) []byte {
		kind := "keep"
		if i%2 == 1 {
			kind = "drop"
		}
		head := fmt.Sprintf(`{"kind":%q,"n":%d,"pad":"`, kind, i)
		pad := strings.Repeat(fmt.Sprintf("%s-%05d.", tag, i), size/(len(tag)+7)+1)[:size-len(head)-2]
		return []byte(head + pad + `"}`)
	}
	type env struct {
		MessageID       string          `json:"messageId"`
		RedeliveryCount uint32          `json:"redeliveryCount"`
		Payload         json.RawMessage `json:"payload"`
		PayloadBase64   string          `json:"payloadBase64"`
	}
	next := func(rd *recordio.Reader, what string) env {
		t.Helper()
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var e env
		if err := json.Unmarshal(rec, &e); err != nil {
			t.Fatalf("%s: the record %.40q... is not an envelope (poison: written from a frame given back): %v", what, rec, err)
		}
		if e.PayloadBase64 != "" {
			p, err := base64.StdEncoding.DecodeString(e.PayloadBase64)
			if err != nil {
				t.Fatalf("%s: payloadBase64: %v", what, err)
			}
			e.Payload = p
		}
		return e
	}
	check := func(e env, want []byte, what string) {
		t.Helper()
		if !bytes.Equal(e.Payload, want) {
			t.Fatalf("%s reads %.40q..., want %.40q... (poison: written from a frame given back)", what, e.Payload, want)
		}
	}
	open := func(stream string) (*recordio.Reader, string, func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+stream, nil)
		req.Header.Set("Accept", "application/recordio")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("GET %s: %s over %s, want 200 over HTTP/2", stream, resp.Status, resp.Proto)
		}
		return recordio.NewReader(resp.Body), resp.Header.Get("Stream-Id"), func() { cancel(); resp.Body.Close() }
	}
	post := func(streamID, what string, ids []string) {
		t.Helper()
		body, _ := json.Marshal(ids)
		req, _ := http.NewRequest(http.MethodPost, base+"c/"+what, bytes.NewReader(body))
		req.Header.Set("Stream-Id", streamID)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", what, resp.Status)
		}
	}
	const perBatch = 16

	// Stream j: batches of 1 KiB JSON messages, half filtered out, and 40 KiB ones of a
	// frame each, written through.
	rd, _, done := open("j")
	const topicJ = "persistent://public/default/h2-json"
	for round := range 40 {
		msgs := make([]pulsartest.BatchMessage, perBatch)
		for i := range msgs {
			msgs[i].Payload = payload("j", round*perBatch+i, 1000)
		}
		b.DeliverBatch(topicJ, 0, 0, msgs...)
		b.DeliverPayloads(topicJ, payload("big", round*2, 40<<10))
	}
	for round := range 40 {
		for i := 0; i < perBatch; i += 2 {
			n := round*perBatch + i
			check(next(rd, "j"), payload("j", n, 1000), fmt.Sprintf("stream j, message %d", n))
		}
		check(next(rd, "j"), payload("big", round*2, 40<<10), fmt.Sprintf("stream j, large message %d", round))
	}
	done()

	// Stream c: a batch held unacknowledged comes again (its first copies superseded and
	// released), then each record is nacked: at maxDeliveries 1, it is dead-lettered.
	rd, id, done := open("c")
	defer done()
	const topicC = "persistent://public/default/h2-client"
	const entries = 20
	batch := func(e int) []pulsartest.BatchMessage {
		msgs := make([]pulsartest.BatchMessage, perBatch)
		for i := range msgs {
			msgs[i].Payload = payload("c", e*perBatch+i, 1000)
		}
		return msgs
	}
	for e := range entries {
		b.DeliverBatch(topicC, 9, uint64(e+1), batch(e)...)
	}
	for e := range entries {
		for i := range perBatch {
			check(next(rd, "c"), payload("c", e*perBatch+i, 1000), fmt.Sprintf("stream c, first delivery of entry %d message %d", e, i))
		}
	}
	for e := range entries {
		b.DeliverBatch(topicC, 9, uint64(e+1), batch(e)...) // a broker's redelivery of what is held
	}
	var ids []string // of the second deliveries, nacked by id (a position could be a first one's)
	for e := range entries {
		for i := range perBatch {
			got := next(rd, "c")
			check(got, payload("c", e*perBatch+i, 1000), fmt.Sprintf("stream c, second delivery of entry %d message %d", e, i))
			ids = append(ids, got.MessageID)
		}
		if e%4 == 3 {
			post(id, "nack", ids)
			ids = ids[:0]
		}
	}
	dlq := "persistent://public/default/h2-dlq"
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Messages(dlq)) < entries*perBatch && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := b.Messages(dlq)
	if len(got) != entries*perBatch {
		seen := map[string]int{}
		for _, m := range got {
			seen[string(m.Payload)]++
		}
		for _, m := range got {
			if seen[string(m.Payload)] > 1 {
				t.Logf("dead-lettered %d times: %.24q... seq %d at %d:%d:%d props %v", seen[string(m.Payload)], m.Payload, m.SequenceID, m.LedgerID, m.EntryID, m.BatchIndex, m.Properties)
			}
		}
		t.Fatalf("%d dead letters, want %d", len(got), entries*perBatch)
	}
	want := map[string]bool{}
	for e := range entries {
		for i := range perBatch {
			want[string(payload("c", e*perBatch+i, 1000))] = true
		}
	}
	for _, m := range got {
		if !want[string(m.Payload)] {
			t.Fatalf("a dead letter reads %.40q..., not a payload published (poison: read from a frame given back)", m.Payload)
		}
		delete(want, string(m.Payload))
	}
}
