package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// TestSIGHUPReloadsAChangedFileWithoutDroppingAStream: the configuration file is
// rewritten in place, inside the volume's current generation, where the bridge's watch
// (on the file's own directory) sees nothing, and the route stays as it was; a SIGHUP
// then reloads it, and the stream that was publishing all along routes its very next
// records by the new rule, loses none and ends with every record persisted.
func TestSIGHUPReloadsAChangedFileWithoutDroppingAStream(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "sighup")
	config := func(version int) string {
		return fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: r
    namespaces: [%s]
    default:
      topic: %s/v%d
`, b.URL, ns, ns, version)
	}
	p := startBridge(t, config(0))
	before, after := fmt.Sprintf("persistent://%s/v0", ns), fmt.Sprintf("persistent://%s/v1", ns)

	// One stream, a record every 20 ms; its receipts say which route was in effect.
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", nil)
	var mu sync.Mutex
	var sentAt []time.Time
	var topics []string // by receipt, in sequence order
	stop := make(chan struct{})
	sendDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				sendDone <- st.pw.Close()
				return
			case <-tick.C:
			}
			mu.Lock()
			sentAt = append(sentAt, time.Now())
			mu.Unlock()
			if err := st.send([]byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
				sendDone <- err
				return
			}
		}
	}()
	receiptsDone := make(chan []receipt, 1)
	go func() {
		var all []receipt
		for r := range st.receipts {
			if r.Summary {
				all = append(all, r)
				continue
			}
			mu.Lock()
			topics = append(topics, r.Topic)
			mu.Unlock()
			all = append(all, r)
		}
		receiptsDone <- all
	}()
	// firstAfter waits for the receipt of the first record sent after `from` and returns its topic.
	firstAfter := func(from time.Time) string {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			for i, tp := range topics {
				if sentAt[i].After(from) {
					mu.Unlock()
					return tp
				}
			}
			mu.Unlock()
		}
		t.Fatalf("no receipt for a record sent after %s", from.Format(time.RFC3339Nano))
		return ""
	}
	if tp := firstAfter(time.Now()); tp != before {
		t.Fatalf("before the rewrite: records went to %s, want %s", tp, before)
	}

	// The rewrite, in place: the file behind the ..data symlink changes, the watched
	// directory does not.
	real, err := filepath.EvalSymlinks(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(old), "/v0\n", "/v1\n", 1)
	if changed == string(old) {
		t.Fatal("the rewrite changed nothing")
	}
	applied := configReloads(t, p.OpsURL, "applied")
	if err := os.WriteFile(real, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	// Not a sync point but the proof that the watch cannot have done it: ten times its
	// settling time (100 ms) later, nothing was reloaded and the old route holds.
	time.Sleep(time.Second)
	if n := configReloads(t, p.OpsURL, "applied"); n != applied {
		t.Fatalf("the in-place rewrite was reloaded without a SIGHUP (%d applied reloads, %d before): the test cannot tell SIGHUP's reload from the watch's", n, applied)
	}
	if tp := firstAfter(time.Now()); tp != before {
		t.Fatalf("after the unseen rewrite: records went to %s, want still %s", tp, before)
	}

	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitConfigReloads(t, p, "applied", applied, 30*time.Second, "SIGHUP")
	if tp := firstAfter(time.Now()); tp != after {
		t.Fatalf("after SIGHUP's reload was applied: records went to %s, want %s", tp, after)
	}
	hupReload := false
	for _, l := range strings.Split(p.logs.String(), "\n") {
		hupReload = hupReload || strings.Contains(l, `"msg":"configuration reloaded"`) && strings.Contains(l, `"trigger":"SIGHUP"`)
	}
	if !hupReload {
		t.Fatalf("no reload triggered by SIGHUP in the logs:\n%s", tail(p.logs.String(), 20))
	}

	// The stream was not dropped: it ends now with every record persisted, on one route or
	// the other, the switch made once.
	close(stop)
	if err := <-sendDone; err != nil {
		t.Fatalf("the stream broke: %v", err)
	}
	var all []receipt
	select {
	case all = <-receiptsDone:
	case <-time.After(time.Minute):
		t.Fatal("no summary within a minute of the stream's end")
	}
	if len(all) == 0 || !all[len(all)-1].Summary {
		t.Fatalf("the stream ended without its summary (%d receipts)", len(all))
	}
	sum, recs := all[len(all)-1], all[:len(all)-1]
	mu.Lock()
	sent := len(sentAt)
	mu.Unlock()
	if sum.Status != 200 || sum.Published != int64(sent) || len(recs) != sent {
		t.Fatalf("%d records sent, %d receipts, summary %+v", sent, len(recs), sum)
	}
	switches := 0
	for i, r := range recs {
		if r.Seq != int64(i) || r.Status != 200 || (r.Topic != before && r.Topic != after) {
			t.Fatalf("receipt %d: %+v", i, r)
		}
		if i > 0 && r.Topic != recs[i-1].Topic {
			switches++
		}
	}
	if switches != 1 {
		t.Fatalf("the route switched %d times in the stream, want once", switches)
	}
	t.Logf("one stream, %d records: the in-place rewrite unseen for 1 s, SIGHUP's reload applied, the next record on the new route; every record persisted", sent)
}
