package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/faultproxy"
)

// TestABrokerCuttingTheHandshakeIsTemporary: the bridge reaches the real broker through
// a proxy that, for a while, resets every new connection right after accepting it (a
// broker restarting, a load balancer cutting in). A record sent meanwhile is answered
// 503 (resend it), a GET 503 with Retry-After; once the proxy lets connections through
// again the same record is published. Before, a handshake cut short was taken for the
// broker's refusal: the record got 502 — refused for good, which a client skips and
// never resends — and the GET 502.
func TestABrokerCuttingTheHandshakeIsTemporary(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "handshake")
	fp, err := faultproxy.New("127.0.0.1:0", strings.TrimPrefix(b.URL, "pulsar://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fp.Close() })
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: pulsar://%s
  operationTimeout: 5s
routes:
  - name: r
    default: {topic: %s}
streams:
  - name: out
    topics: [%s]
`, fp.Addr(), topic, topic))
	fp.Set(faultproxy.Faults{Refuse: true})
	fp.Reset() // the bridge's open connections go too: the next step dials

	st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", nil)
	if err := st.send(rec(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-st.receipts:
		t.Logf("receipt while cut: %+v", r)
		if r.Status != 503 {
			t.Errorf("a record while every handshake is cut: %+v; want 503", r)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no receipt within 60 s")
	}
	_, _, _ = st.finish(60 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a GET while every handshake is cut: %d (Retry-After %q); want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	fp.Heal()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", nil)
		if err := st.send(rec(0)); err != nil {
			t.Fatal(err)
		}
		rs, _, err := st.finish(60 * time.Second)
		if err == nil && len(rs) == 1 && rs[0].Status == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the proxy healed the record is still not published: %+v, %v", rs, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
