package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// loadRecord is a record of one of the endless streams; its payload names its stream and seq.
func loadRecord(stream, seq int) []byte {
	return []byte(fmt.Sprintf(`{"type":"LOAD","stream":%d,"seq":%d}`, stream, seq))
}

// endlessSender feeds a stream until stop closes, a few records at a time, and collects
// its receipts.
type endlessSender struct {
	st       *ingressStream
	id       int
	sent     atomic.Int64
	receipts []receipt
	sum      receipt
	err      error
	done     chan struct{}
}

func startEndless(t testing.TB, url string, id int, stop <-chan struct{}, every time.Duration, gen func(stream, seq int) []byte) *endlessSender {
	s := &endlessSender{st: openStream(t, h1Client, url, nil), id: id, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sendDone := make(chan struct{})
		go func() {
			defer close(sendDone)
			tick := time.NewTicker(every)
			defer tick.Stop()
			seq := 0
			for {
				select {
				case <-stop:
					s.st.pw.Close()
					return
				case <-tick.C:
				}
				batch := make([][]byte, 5)
				for i := range batch {
					batch[i] = gen(id, seq+i)
				}
				if err := s.st.send(batch...); err != nil {
					return // the response ended (drain): the body is no longer read
				}
				seq += len(batch)
				s.sent.Store(int64(seq))
			}
		}()
		s.receipts, s.sum, s.err = s.st.drain(5 * time.Minute)
		s.st.pw.CloseWithError(io.ErrClosedPipe) // unblocks a sender stuck in Write
		<-sendDone
	}()
	return s
}

// TestIngressReloadUnderLoad rewrites the configuration 20 times by ConfigMap-style
// symlink swaps (valid and invalid in turn) while 50 endless streams publish: no stream
// is dropped, no record lost, and once a valid rewrite is applied (the sync point:
// bridge_config_reloads_total{result="applied"} counts it) the very next record routed
// follows the new rule; a refused one (the sync point: /readyz's lastReloadError) leaves
// the previous rule in effect.
func TestIngressReloadUnderLoad(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "reload")
	loadTopic := "persistent://" + ns + "/load"
	config := func(version int, broken string) string {
		return fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: load
    namespaces: [%s]
    rules:
      - match: {json: {type: PROBE}}
        topic: %s/probe-v%d
%s    default:
      topic: %s
`, b.URL, ns, ns, version, broken, loadTopic)
	}
	broken := []string{
		"      - topic: \"x-{nope}\"\n",      // a bad placeholder
		"        bogus: 1\n",                 // an unknown key
		"      - match: {json: {type: X}}\n", // a rule without a topic
		"    namespaces: [again]\n",          // a duplicate key
		"      - topic: other/ns/x\n",        // outside the namespaces
	}
	p := startBridge(t, config(0, ""))
	url := p.DataURL + "/v1/publish/load"

	stop := make(chan struct{})
	var senders []*endlessSender
	for i := range 50 {
		senders = append(senders, startEndless(t, url, i, stop, 20*time.Millisecond, loadRecord))
	}
	// The probe stream: one PROBE record every 20 ms; its receipts say which route was in effect.
	type probeResult struct {
		sentAt time.Time
		topic  string
	}
	probe := openStream(t, h1Client, url, nil)
	var probeMu sync.Mutex
	var probeSent []time.Time
	var probes []probeResult
	probeStop := make(chan struct{})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-probeStop:
				probe.pw.Close()
				return
			case <-tick.C:
			}
			probeMu.Lock()
			probeSent = append(probeSent, time.Now())
			probeMu.Unlock()
			if err := probe.send([]byte(fmt.Sprintf(`{"type":"PROBE","n":%d}`, i))); err != nil {
				return
			}
		}
	}()
	go func() {
		for r := range probe.receipts {
			if r.Summary {
				continue
			}
			probeMu.Lock()
			probes = append(probes, probeResult{sentAt: probeSent[r.Seq], topic: r.Topic})
			probeMu.Unlock()
		}
	}()
	// effectiveAfter waits for the first probe sent after `after` and returns its topic.
	effectiveAfter := func(after time.Time) (string, time.Duration) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			probeMu.Lock()
			for _, pr := range probes {
				if pr.sentAt.After(after) {
					probeMu.Unlock()
					return pr.topic, pr.sentAt.Sub(after)
				}
			}
			probeMu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
		return "", 0
	}
	// waitFor returns how long after `from` probes started landing in topic.
	waitFor := func(from time.Time, topic string) time.Duration {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			probeMu.Lock()
			for _, pr := range probes {
				if pr.sentAt.After(from) && pr.topic == topic {
					probeMu.Unlock()
					return pr.sentAt.Sub(from)
				}
			}
			probeMu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
		return -1
	}

	// Probes are landing before the first rewrite.
	if topic, _ := effectiveAfter(time.Time{}); topic == "" {
		t.Fatal("no probe receipted within 10s")
	}
	version := 0
	var worst time.Duration
	for i := 1; i <= 20; i++ {
		at := time.Now()
		if i%2 == 0 {
			version++
			applied := configReloads(t, p.OpsURL, "applied")
			p.write(config(version, ""))
			want := fmt.Sprintf("persistent://%s/probe-v%d", ns, version)
			// The sync point: the reload is counted as applied (a generous deadline, so a
			// reload that never lands fails instead of hanging).
			waitConfigReloads(t, p, "applied", applied, 30*time.Second, fmt.Sprintf("rewrite %d", i))
			// A valid file clears the refusal shown before it.
			if rz := p.readyz(t); rz["lastReloadError"] != nil {
				t.Fatalf("rewrite %d: applied, but /readyz still shows lastReloadError %v", i, rz["lastReloadError"])
			}
			// Every probe sent from now on is routed by the new rule, the first one included.
			if topic, _ := effectiveAfter(time.Now()); topic != want {
				t.Fatalf("rewrite %d: the first probe after the reload was applied went to %q, want %s", i, topic, want)
			}
			worst = max(worst, waitFor(at, want)) // a figure for the log, not a bound
		} else {
			invalid := configReloads(t, p.OpsURL, "invalid")
			p.write(config(version, broken[(i/2)%len(broken)]))
			// The refusal of this file is the sync point: the refused reloads' counter
			// passes its count before the write (a lastReloadError on /readyz could be an
			// earlier file's), then the next probe shows which route is in effect.
			waitConfigReloads(t, p, "invalid", invalid, 30*time.Second, fmt.Sprintf("rewrite %d (invalid)", i))
			topic, _ := effectiveAfter(time.Now())
			if want := fmt.Sprintf("persistent://%s/probe-v%d", ns, version); topic != want {
				t.Fatalf("rewrite %d (invalid): probes went to %s, want the previous route's %s", i, topic, want)
			}
			if rz := p.readyz(t); rz["lastReloadError"] == nil || rz["ready"] != true {
				t.Fatalf("rewrite %d (invalid): readyz %v", i, rz)
			}
		}
	}
	close(stop)
	close(probeStop)
	<-probeDone
	total := 0
	for _, s := range senders {
		<-s.done
		n := int(s.sent.Load())
		if s.err != nil || s.sum.Status != 200 || s.sum.Published != int64(n) || len(s.receipts) != n {
			t.Fatalf("stream %d: sent %d, %d receipts, summary %+v, err %v", s.id, n, len(s.receipts), s.sum, s.err)
		}
		for i, r := range s.receipts {
			if r.Seq != int64(i) || r.Status != 200 || r.Topic != loadTopic {
				t.Fatalf("stream %d receipt %d: %+v", s.id, i, r)
			}
		}
		total += n
	}
	// Every record is in Pulsar exactly once.
	c := newOfficialClient(t, b)
	seen := make(map[[2]int]bool, total)
	for _, payload := range readTopic(t, c, loadTopic, total) {
		var r struct{ Stream, Seq int }
		if err := json.Unmarshal([]byte(payload), &r); err != nil {
			t.Fatal(err)
		}
		k := [2]int{r.Stream, r.Seq}
		if seen[k] {
			t.Fatalf("stream %d seq %d twice", r.Stream, r.Seq)
		}
		seen[k] = true
	}
	metrics := scrape(t, p.OpsURL)
	t.Logf("50 streams, 20 rewrites (10 valid, 10 invalid): %d records, none lost or doubled, no stream dropped; first probe on a new route at worst %s after the swap; %s",
		total, worst.Round(time.Millisecond), grepLines(metrics, "bridge_config_reloads_total"))
}

// TestIngressDrainsOnSIGTERMUnderLoad sends SIGTERM while 20 streams publish: the bridge
// stops reading, answers what it read, ends every stream with its summary and exits 0
// within the drain timeout; every receipted record is in Pulsar exactly once.
func TestIngressDrainsOnSIGTERMUnderLoad(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "drain")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress:
  drainTimeout: 5s
routes:
  - name: d
    default: {topic: %s}
`, b.URL, topic))
	stop := make(chan struct{})
	var senders []*endlessSender
	for i := range 20 {
		senders = append(senders, startEndless(t, p.DataURL+"/v1/publish/d", i, stop, 5*time.Millisecond, loadRecord))
	}
	time.Sleep(2 * time.Second)
	err, took := p.terminate(30 * time.Second)
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v (after %s)\n%s", err, took, tail(p.logs.String(), 20))
	}
	// The drain's deadline is the bridge's to keep; past it only the exit itself is left
	// (closing connections, flushing nothing more, the race detector's report on the
	// -race binary), which a loaded 2-core machine can stretch by a second or two: the
	// slack. A bridge that waited for its endless streams would exit much later, or not.
	const drain, slack = 5 * time.Second, 2 * time.Second
	if took > drain+slack {
		t.Fatalf("exit took %s, the drain timeout is %s (+ %s for the exit)", took, drain, slack)
	}
	close(stop)
	receipted := 0
	statuses := map[int]int{}
	for _, s := range senders {
		<-s.done
		if s.err != nil || !s.sum.Summary {
			t.Fatalf("stream %d ended without its summary: %v", s.id, s.err)
		}
		statuses[s.sum.Status]++
		seqs := map[int64]bool{}
		for _, r := range s.receipts {
			if seqs[r.Seq] {
				t.Fatalf("stream %d: seq %d receipted twice", s.id, r.Seq)
			}
			seqs[r.Seq] = true
			if r.Status == 200 {
				receipted++
			}
		}
		if s.sum.Published+s.sum.Failed != int64(len(s.receipts)) {
			t.Fatalf("stream %d: summary %+v but %d receipts", s.id, s.sum, len(s.receipts))
		}
	}
	// Restart-free check: every receipted record is in the topic exactly once.
	want := map[[2]int]bool{}
	for _, s := range senders {
		for _, r := range s.receipts {
			if r.Status == 200 {
				want[[2]int{s.id, int(r.Seq)}] = true
			}
		}
	}
	c := newOfficialClient(t, b)
	cons := officialSubscribe(t, c, topic)
	got := map[[2]int]int{}
	extra := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(got) < len(want) {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%d of %d receipted records found, then %v", len(got), len(want), err)
		}
		var r struct{ Stream, Seq int }
		_ = json.Unmarshal(msg.Payload(), &r)
		k := [2]int{r.Stream, r.Seq}
		if want[k] {
			got[k]++
			if got[k] > 1 {
				t.Fatalf("stream %d seq %d is in the topic twice", r.Stream, r.Seq)
			}
		} else {
			extra++
		}
	}
	t.Logf("SIGTERM under load: exit 0 after %s (drain timeout 5s); %d records receipted, all in Pulsar once (%d more read but not receipted); stream summaries by status %v",
		took.Round(time.Millisecond), receipted, extra, statuses)
	if !strings.Contains(p.logs.String(), `"msg":"bridge stopped"`) {
		t.Fatalf("no clean stop in the logs")
	}
}

func scrape(t testing.TB, opsURL string) string {
	t.Helper()
	resp, err := h1Client.Get(opsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// configReloads is the bridge's count of configuration reloads with result (applied,
// invalid or unchanged), from /metrics. The counter appears with its first reload of that
// result, so before one it is 0; a renamed counter stays 0 and fails the waits on it.
func configReloads(t testing.TB, opsURL, result string) int {
	t.Helper()
	series := `bridge_config_reloads_total{result="` + result + `"}`
	m := scrape(t, opsURL)
	if !strings.Contains(m, series+" ") {
		return 0
	}
	return int(metricValue(t, m, series))
}

// waitConfigReloads waits until the bridge counts more than after reloads with result,
// failing the test after d.
func waitConfigReloads(t testing.TB, p *bridgeProc, result string, after int, d time.Duration, what string) int {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if n := configReloads(t, p.OpsURL, result); n > after {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no reload counted %s within %s: %s", what, result, d, grepLines(scrape(t, p.OpsURL), "bridge_config_reloads_total"))
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}
