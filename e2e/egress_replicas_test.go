package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// A client reading a subscription (ack=client) from one bridge process reconnects to
// another (as through a load balancer) with the message ids the first delivered and it
// never acknowledged, for each subscription type egress serves. Acknowledging them with
// the first stream's Stream-Id on the second process is 409 (no such stream open there),
// never a 200 that acknowledges nothing. Once the first stream has ended its consumer's
// unacknowledged messages go back to the subscription and the second process's stream
// delivers them again under the same ids, which it then acknowledges: 200, and the
// subscription's backlog on the broker is 0.
func TestEgressAcksAfterTheClientMovesToAnotherBridgeProcess(t *testing.T) {
	b := broker.Get(t)
	for _, typ := range []string{"exclusive", "shared", "failover", "key_shared"} {
		t.Run(typ, func(t *testing.T) {
			topic := b.Topic(t, "replica-acks")
			publishUnbatched(t, b, topic, 10)
			cfg := fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    subscription: moving
    position: earliest
    type: %s
    ack: client
    envelope: json
    ackTimeout: 10m
`, b.URL, topic, typ)
			a, bp := startBridge(t, cfg), startBridge(t, cfg)
			read := func(p *bridgeProc) (closeIt func(), sid string, ids []string) {
				t.Helper()
				ctx, cancel := context.WithCancel(context.Background())
				deadline := time.Now().Add(time.Minute)
				var resp *http.Response
				for {
					resp = egressGet(t, ctx, p.DataURL+"/v1/streams/out", map[string]string{"Message-Accept": "application/json"})
					if resp.StatusCode == 200 {
						break
					}
					resp.Body.Close()
					if time.Now().After(deadline) {
						t.Fatalf("GET on the second process: %d for a minute", resp.StatusCode)
					}
					time.Sleep(200 * time.Millisecond) // the first consumer is still closing (exclusive, failover)
				}
				sid = resp.Header.Get("Stream-Id")
				rd := recordio.NewReader(resp.Body)
				for range 10 {
					rec, err := rd.Next()
					if err != nil {
						t.Fatalf("after %d records: %v", len(ids), err)
					}
					var e struct {
						MessageID string `json:"messageId"`
					}
					if err := json.Unmarshal(rec, &e); err != nil || e.MessageID == "" {
						t.Fatalf("%q: %v", rec, err)
					}
					ids = append(ids, e.MessageID)
				}
				return func() { cancel(); resp.Body.Close() }, sid, ids
			}
			closeA, sidA, idsA := read(a)
			js, _ := json.Marshal(idsA)
			st, m := postAck(t, bp.DataURL+"/v1/streams/out/ack", sidA, "application/json", js)
			if st != 409 || m["acked"] != nil || !strings.Contains(fmt.Sprint(m["error"]), "nothing was acknowledged") {
				t.Fatalf("the first stream's ids acknowledged on the second process with its Stream-Id: %d %v, want 409", st, m)
			}
			closeA() // the client is gone from the first process

			closeB, sidB, idsB := read(bp)
			defer closeB()
			sortedA, sortedB := append([]string(nil), idsA...), append([]string(nil), idsB...)
			sort.Strings(sortedA)
			sort.Strings(sortedB)
			if fmt.Sprint(sortedA) != fmt.Sprint(sortedB) {
				t.Fatalf("the second process delivered %v, the first %v: want the same messages again", idsB, idsA)
			}
			st, m = postAck(t, bp.DataURL+"/v1/streams/out/ack", sidB, "application/json", js)
			if st != 200 || m["acked"] != float64(10) {
				t.Fatalf("the first stream's ids acknowledged on the second process's stream: %d %v, want 200 acked 10", st, m)
			}
			var stats struct {
				Subscriptions map[string]struct {
					MsgBacklog int64 `json:"msgBacklog"`
				} `json:"subscriptions"`
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				if err := json.Unmarshal(b.MustAdmin(t, http.MethodGet, adminTopicPath(topic)+"/stats", nil), &stats); err != nil {
					t.Fatal(err)
				}
				if stats.Subscriptions["moving"].MsgBacklog == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the subscription's backlog is still %d", stats.Subscriptions["moving"].MsgBacklog)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
