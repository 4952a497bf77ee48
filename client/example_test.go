package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/recordio-bridge/bridge/client"
	"github.com/recordio-bridge/bridge/recordio"
)

// A scheduler publishes its events exactly once: it numbers them from its own durable
// state (here, the events' offsets in its log), and after a restart starts again at the
// first event it has no receipt for.
func ExamplePublisher() {
	bridge := exampleBridge() // stands in for the bridge's ingress
	defer bridge.Close()

	events := []string{`{"type":"SUBSCRIBED"}`, `{"type":"UPDATE"}`, `not json`}
	first := uint64(0) // the offset of the first event without a receipt, from the scheduler's log
	p, err := client.NewPublisher(client.PublisherOptions{
		URL:           bridge.URL + "/v1/publish/mesos",
		StreamName:    "scheduler-1",
		FirstSequence: first,
		OnReceipt: func(r client.Receipt) {
			if r.Err != nil {
				fmt.Printf("event %d: %v\n", r.Sequence, r.Err) // refused for good: never resent
				return
			}
			fmt.Printf("event %d: %s on %s\n", r.Sequence, r.Outcome, r.Topic)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, e := range events[first:] {
		if _, err := p.Publish(ctx, []byte(e)); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("next run starts at", p.NextSequence())
	// Output:
	// event 0: persisted on persistent://public/default/tasks
	// event 1: persisted on persistent://public/default/tasks
	// event 2: record 2 refused for good (422): not JSON
	// next run starts at 3
}

// A reader acknowledges each message once it has processed it; what it does not
// acknowledge is delivered again, also after a reconnect.
func ExampleSubscriber() {
	bridge := exampleBridge() // stands in for the bridge's egress
	defer bridge.Close()

	s, err := client.NewSubscriber(client.SubscriberOptions{
		URL:      bridge.URL + "/v1/streams/tasks",
		Ack:      client.AckClient,
		Envelope: "json",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for range 2 {
		m, err := s.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(m.ID, string(m.Data))
		if err := s.Ack(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// 5:0:-1:-1 {"messageId":"5:0:-1:-1","payload":{"type":"UPDATE"}}
	// 5:1:-1:-1 {"messageId":"5:1:-1:-1","payload":{"type":"UPDATE"}}
}

// exampleBridge answers as the bridge does, briefly: receipts for JSON records, 422 for
// others; a stream of two messages, acknowledged by id.
func exampleBridge() *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/publish/mesos", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.Header().Set("Content-Type", "application/recordio")
		w.WriteHeader(http.StatusOK)
		rd := recordio.NewReader(r.Body)
		var seq uint64
		_, _ = fmt.Sscan(r.Header.Get("Stream-Sequence"), &seq)
		for i := 0; ; i++ {
			rec, err := rd.Next()
			if err != nil {
				fmt.Fprint(w, answer(map[string]any{"summary": true, "records": i, "status": 200}))
				return
			}
			a := map[string]any{"seq": i, "status": 200, "sequence": seq + uint64(i), "topic": "persistent://public/default/tasks", "messageId": fmt.Sprintf("5:%d:-1:-1", i)}
			if !json.Valid(rec) {
				a = map[string]any{"seq": i, "status": 422, "sequence": seq + uint64(i), "error": "not JSON"}
			}
			fmt.Fprint(w, answer(a))
			_ = rc.Flush()
		}
	})
	mux.HandleFunc("GET /v1/streams/tasks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Stream-Id", "s1")
		w.Header().Set("Content-Type", "application/recordio")
		for i := range 2 {
			fmt.Fprint(w, answer(map[string]any{"messageId": fmt.Sprintf("5:%d:-1:-1", i), "payload": map[string]string{"type": "UPDATE"}}))
		}
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("POST /v1/streams/tasks/ack", func(w http.ResponseWriter, r *http.Request) {
		var ids []string
		if r.Header.Get("Stream-Id") != "s1" || json.NewDecoder(r.Body).Decode(&ids) != nil {
			http.Error(w, `{"status":400}`, http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"status":200,"acked":%d}`, len(ids))
	})
	return httptest.NewServer(mux)
}

func answer(v map[string]any) string {
	b, _ := json.Marshal(v)
	return string(recordio.AppendRecord(nil, b))
}
