package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestNamedStreamThroughAnOpenIDBrokerRestartedWhileItsIdentityProviderIsDown: the
// bridge publishes a named stream (exactly-once, deduplication on for the namespace)
// with a token the broker's OpenID provider verifies against the identity provider's
// keys. The identity provider goes down, the broker restarts, and for 20 s after it is
// back it cannot fetch the keys: it answers every CONNECT with AuthenticationError. The
// bridge's producer reconnects with backoff through those refusals, its records are
// answered 503 meanwhile (/readyz naming the refusal), and a client resuming as
// docs/exactly-once.md says loses nothing: no record is answered 502 (which it would
// skip), and the topic, read back with the official Go client, holds every record once.
func TestNamedStreamThroughAnOpenIDBrokerRestartedWhileItsIdentityProviderIsDown(t *testing.T) {
	ab := startAuthBroker(t)
	const role = "bridge-jwks"
	ab.grant(t, role)
	ab.admin(t, http.MethodPost, "/admin/v2/namespaces/auth/allowed/deduplication", "true")
	token, err := ab.idp.Sign(ab.idp.Claims(role, authAudience, 2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://auth/allowed/" + broker.Name("jwks")
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  token: file:%s\ningress:\n  publishTimeout: 10s\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n", ab.url, tokenFile, topic))

	cl := &resumingClient{url: p.DataURL + "/v1/publish/r", stream: "jwks-1", statuses: map[int]int{}}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() { defer close(done); cl.run(&stop, 20) }()
	defer func() { stop.Store(true); <-done }()
	waitFor := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s (client: %s)", what, within, cl.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("records flowing", time.Minute, func() bool { return cl.acked() >= 40 })

	ab.idp.Stop()
	stopped := time.Now()
	if err := ab.ctl("stop"); err != nil {
		t.Fatal(err)
	}
	if err := ab.ctl("start"); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	t.Logf("broker back after %s with the identity provider down; client so far: %s", up.Sub(stopped).Round(time.Second), cl.String())
	// 20 s of a broker that refuses the bridge's credentials: /readyz says so.
	var refusal string
	for time.Since(up) < 20*time.Second {
		m := p.readyz(t)
		if rs, ok := m["brokerHandshakeRefused"].([]any); ok && refusal == "" {
			if r, ok := rs[0].(map[string]any); ok && strings.Contains(fmt.Sprint(r["error"]), "AuthenticationError") {
				refusal = fmt.Sprint(r["error"])
				t.Logf("/readyz %s after the broker came back: broker %q, refused %v", time.Since(up).Round(100*time.Millisecond), m["broker"], r)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := ab.idp.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// The refusal shows in /readyz whichever path met it (a producer's reconnection, which
	// logs it, or a new creation retrying it within its deadline, which does not): a run
	// in which the broker never refused the bridge's handshake did not test anything.
	if refusal == "" && !strings.Contains(p.logs.String(), "AuthenticationError") {
		t.Fatalf("the broker refused no handshake of the bridge with AuthenticationError (neither /readyz nor the log says so): the test did not meet what it is about\n%s", tail(p.logs.String(), 30))
	}
	// Records flow again; the client offers more for 10 s, then catches up.
	before := cl.acked()
	waitFor("records flowing after the identity provider came back", 2*time.Minute, func() bool { return cl.acked() > before })
	t.Logf("first record persisted %s after the identity provider came back", time.Since(back).Round(100*time.Millisecond))
	time.Sleep(10 * time.Second)
	stop.Store(true)
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the client did not catch up within 3 minutes: %s", cl.String())
	}

	c, err := official.NewClient(official.ClientOptions{URL: ab.url, Authentication: official.NewAuthenticationToken(ab.superuser),
		OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	count := map[string]int{}
	for _, m := range readAll(t, c, topic, 5*time.Second) {
		count[string(m.Payload())]++
	}
	var lost, twice []int
	for i := range cl.produced {
		switch count[string(rec(i))] {
		case 0:
			lost = append(lost, i)
		case 1:
		default:
			twice = append(twice, i)
		}
	}
	t.Logf("%d records offered, %d on the topic; receipts by status %v; %d requests", cl.produced, len(count), cl.statuses, cl.requests)
	if cl.statuses[http.StatusBadGateway] > 0 || len(lost) > 0 || len(twice) > 0 || len(count) != cl.produced {
		t.Fatalf("records answered 502: %d (first %q); lost %d %v; stored twice %d %v; %d distinct on the topic for %d offered",
			cl.statuses[http.StatusBadGateway], cl.first502, len(lost), head(lost), len(twice), head(twice), len(count), cl.produced)
	}
	if cl.statuses[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("no record was answered 503 across the restart and the refusals: %v", cl.statuses)
	}
	if refusal == "" {
		t.Fatal("/readyz never named the broker's AuthenticationError while it refused the bridge's handshakes")
	}
}

func head(xs []int) []int { return xs[:min(len(xs), 10)] }

// resumingClient publishes records rec(0), rec(1), ... on one named stream, as
// docs/exactly-once.md's client does: each request sends the records from the first not
// yet answered for good, and a record answered 200, 4xx but 408, or 502 is never sent
// again; anything else ends the request and the next one starts from that record.
type resumingClient struct {
	url, stream string

	mu       sync.Mutex
	next     int         // the first record not answered for good
	produced int         // records offered so far (rec(0)..rec(produced-1))
	statuses map[int]int // receipts by status
	first502 string
	requests int
}

// run offers perSecond records a second until stop, then sends until every record
// offered is answered for good.
func (c *resumingClient) run(stop *atomic.Bool, perSecond int) {
	start := time.Now()
	for {
		c.mu.Lock()
		if !stop.Load() {
			c.produced = max(c.produced, int(time.Since(start).Seconds()*float64(perSecond)))
		}
		first, last := c.next, c.produced
		c.mu.Unlock()
		if first == last {
			if stop.Load() {
				return
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		done, err := c.publish(first, min(last, first+50))
		c.mu.Lock()
		c.next += done
		c.mu.Unlock()
		if err != nil {
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// publish sends records first..last-1 as one request and returns how many from first on
// were answered for good.
func (c *resumingClient) publish(first, last int) (int, error) {
	var body []byte
	for i := first; i < last; i++ {
		body = recordio.AppendRecord(body, rec(i))
	}
	req, _ := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	for k, v := range streamHeaders {
		req.Header.Set(k, v)
	}
	req.Header.Set("Stream-Name", c.stream)
	req.Header.Set("Stream-Sequence", strconv.Itoa(first))
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	resp, err := h1Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/recordio") {
		return 0, errors.New(resp.Status)
	}
	done, rd := 0, recordio.NewReader(resp.Body)
	for {
		raw, err := rd.Next()
		if err != nil {
			return done, err
		}
		var r receipt
		if err := json.Unmarshal(raw, &r); err != nil {
			return done, err
		}
		if r.Summary {
			return done, nil
		}
		c.mu.Lock()
		c.statuses[r.Status]++
		if r.Status == http.StatusBadGateway && c.first502 == "" {
			c.first502 = fmt.Sprintf("record %d: %s", first+int(r.Seq), r.Error)
		}
		c.mu.Unlock()
		switch {
		case int(r.Seq) != done:
			return done, fmt.Errorf("receipt %d out of order", r.Seq)
		case r.Status == 200 || r.Status >= 400 && r.Status < 500 && r.Status != 408 || r.Status == 502:
			done++
		default:
			return done, fmt.Errorf("record %d: %d %s", first+done, r.Status, r.Error)
		}
	}
}

func (c *resumingClient) acked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

func (c *resumingClient) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("next %d of %d offered, receipts %v, %d requests", c.next, c.produced, c.statuses, c.requests)
}
