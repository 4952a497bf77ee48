package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// TestAuthorization: with a token granted chaos/allowed only, records routed to
// chaos/forbidden are answered one by one with a clear permanent error (no reconnect loop,
// no 503 to retry) while a stream to an allowed topic goes on; an egress stream on a
// forbidden topic ends with a clear error.
func TestAuthorization(t *testing.T) {
	c := useCluster(t)
	run := randName("authz")
	allowed := "persistent://chaos/allowed/" + run
	forbidden := "persistent://chaos/forbidden/" + run
	// Straight to the brokers: through a Pulsar proxy (4.0.8) the broker's AuthorizationError
	// reaches the client as UnknownError with no message (docs/chaos.md).
	cfg := bridgeConfig(c, viaDirect, c.Broker2URL, []string{allowed}) + fmt.Sprintf("  - name: nope\n    topics: [%s]\n    position: earliest\n", forbidden)
	b := startBridge(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// An allowed stream runs all along.
	ok := newIngressClient(b.DataURL+"/v1/publish/load", run, run+"-ok", 20*time.Millisecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ok.run(ctx, stop) }()
	defer func() { close(stop); wg.Wait() }()

	// Three records to the forbidden topic, in one request.
	start := time.Now()
	var body []byte
	for i := range 3 {
		body = recordio.AppendRecord(body, fmt.Appendf(nil, `{"id":"%s-f-%d","k":"f","n":%d}`, run, i, i))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.DataURL+"/v1/publish/forbidden", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", "application/json")
	req.Header.Set("X-Topic", run)
	resp, err := ingressHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := recordio.NewReader(resp.Body)
	var got []string
	for {
		rec, err := rd.Next()
		if err != nil {
			break
		}
		got = append(got, string(rec))
	}
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("forbidden topic: answered in %s: %s", took.Round(time.Millisecond), strings.Join(got, " "))
	if len(got) != 4 {
		t.Fatalf("want 3 per-record answers and a summary, got %d: %v", len(got), got)
	}
	for _, g := range got[:3] {
		low := strings.ToLower(g)
		if strings.Contains(g, `"status":200`) || strings.Contains(g, `"status":503`) || !strings.Contains(low, "authoriz") {
			t.Errorf("a record to a forbidden topic was answered %s; want a permanent refusal naming authorization", g)
		}
	}

	// The allowed stream kept going.
	since := time.Now()
	if !waitFor(ctx, time.Minute, func() bool { return ok.lastOK.Load() > since.UnixNano() }) {
		t.Errorf("the allowed stream stopped getting receipts")
	}

	// Egress on a forbidden topic: a clear error, not an endless retry.
	ectx, ecancel := context.WithTimeout(ctx, time.Minute)
	defer ecancel()
	ereq, _ := http.NewRequestWithContext(ectx, http.MethodGet, b.DataURL+"/v1/streams/nope", nil)
	ereq.Header.Set("Accept", "application/recordio")
	ereq.Header.Set("Message-Accept", "application/json")
	eresp, err := ingressHTTP.Do(ereq)
	if err != nil {
		t.Fatalf("egress on a forbidden topic: %v", err)
	}
	eb, rerr := io.ReadAll(eresp.Body)
	eresp.Body.Close()
	t.Logf("egress on a forbidden topic: %d %q (%v)", eresp.StatusCode, eb, rerr)
	if ectx.Err() != nil {
		t.Fatalf("egress on a forbidden topic: no end within a minute (status %d, %q)", eresp.StatusCode, eb)
	}
	if eresp.StatusCode == http.StatusOK && !strings.Contains(strings.ToLower(string(eb)), "authoriz") {
		t.Errorf("egress on a forbidden topic ended without naming authorization: %q", eb)
	}
	if eresp.StatusCode != http.StatusOK && !strings.Contains(strings.ToLower(string(eb)), "authoriz") {
		t.Errorf("egress on a forbidden topic: %d %q; want an error naming authorization", eresp.StatusCode, eb)
	}
	addRow(row{Fault: "authz: forbidden topic (3 records) + forbidden egress", Load: "1 allowed stream alongside", Receipted: 0,
		Recovered: "n/a", Result: resultOf(t)})
}

func resultOf(t *testing.T) string {
	if t.Failed() {
		return "FAIL (see the test log)"
	}
	return "ok"
}
