package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/javapeer"
)

// seekFixture is a partitioned topic holding two runs of a batched Java producer a
// moment apart then a run of one that does not batch, the time between the first two
// runs, a message of the second run inside a batch and one of the third.
type seekFixture struct {
	b                    *broker.Broker
	topic                string
	first, second, third []javapeer.Message
	between              time.Time
	target               javapeer.Message // of the second run, batch index > 0
	single               javapeer.Message // of the third run, not batched
}

func (f *seekFixture) all() int { return len(f.first) + len(f.second) + len(f.third) }

func newSeekFixture(t *testing.T) *seekFixture {
	t.Helper()
	b := broker.Get(t)
	f := &seekFixture{b: b, topic: b.Topic(t, "seek")}
	b.CreatePartitionedTopic(t, f.topic, 3)
	spec := javapeer.Spec{URL: b.URL, Topic: f.topic, Count: 150, Size: 40, Keys: 30, BatchMaxMessages: 10, BatchDelayMs: 50}
	f.first = mustProduce(t, spec)
	time.Sleep(1500 * time.Millisecond)
	f.between = time.Now()
	time.Sleep(1500 * time.Millisecond)
	spec.Seed = 2
	f.second = mustProduce(t, spec)
	f.third = mustProduce(t, javapeer.Spec{URL: b.URL, Topic: f.topic, Count: 30, Size: 40, Keys: 30, NoBatching: true, Seed: 3})
	f.single = f.third[len(f.third)/2]
	for _, m := range f.second[len(f.second)/3:] {
		if m.ID.BatchIndex > 0 {
			f.target = m
			break
		}
	}
	if f.target.ID.BatchIndex <= 0 {
		t.Fatalf("no message of the second run inside a batch: %+v", f.second[len(f.second)/3].ID)
	}
	return f
}

func idText(id javapeer.ID) string {
	return fmt.Sprintf("%d:%d:%d:%d", id.Ledger, id.Entry, id.Partition, id.BatchIndex)
}

// replayed is what a replay delivered: id -> payload hash.
type replayed map[string]string

func (r replayed) ids() []string {
	out := make([]string, 0, len(r))
	for id := range r {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// javaReplay is the oracle: the Java client consumes everything on a new subscription,
// seeks (by time or to the message it received with seekID), and reads again.
func (f *seekFixture) javaReplay(t *testing.T, sub string, seekTime int64, seekID string) replayed {
	t.Helper()
	got, sum := javapeer.Consume(t, javapeer.Spec{URL: f.b.URL, Topic: f.topic, Subscription: sub, Position: "Earliest",
		TimeoutMs: 5000, SeekTime: seekTime, SeekID: seekID})
	out := replayed{}
	first := 0
	for _, m := range got {
		if m.Phase == 2 {
			out[idText(m.ID)] = m.SHA256
		} else {
			first++
		}
	}
	if first != f.all() {
		t.Fatalf("the Java consumer read %d messages before its seek, want %d; its log:\n%s", first, f.all(), sum.Stderr)
	}
	return out
}

// records turns envelope records into what they replayed.
func replayOf(recs []*egressRecord) replayed {
	out := replayed{}
	for _, r := range recs {
		out[r.MessageID] = hashOf(r.bytes())
	}
	return out
}

// sameReplay fails t unless the bridge replayed what the oracle did.
func sameReplay(t *testing.T, what string, bridge, java replayed) {
	t.Helper()
	if len(java) == 0 {
		t.Fatalf("%s: the Java client replayed nothing", what)
	}
	if fmt.Sprint(bridge.ids()) != fmt.Sprint(java.ids()) {
		var missing, extra []string
		for id := range java {
			if _, ok := bridge[id]; !ok {
				missing = append(missing, id)
			}
		}
		for id := range bridge {
			if _, ok := java[id]; !ok {
				extra = append(extra, id)
			}
		}
		slices.Sort(missing)
		slices.Sort(extra)
		t.Fatalf("%s: the bridge replayed %d messages, the Java client %d; not replayed by the bridge: %v; replayed by the bridge only: %v",
			what, len(bridge), len(java), missing, extra)
	}
	for id, h := range java {
		if bridge[id] != h {
			t.Fatalf("%s: %s has another payload on the bridge", what, id)
		}
	}
}

func seekBridge(t *testing.T, f *seekFixture) *bridgeProc {
	t.Helper()
	return egressBridge(t, f.b, f.topic, "    envelope: json\n    overrides: [subscription, position, ack]\n", "")
}

// readSeekStream opens a GET of the stream with query q and reads until it is idle.
func readSeekStream(t *testing.T, p *bridgeProc, q url.Values, want int) (*egressReader, []*egressRecord) {
	t.Helper()
	r := openEgressReader(t, p.DataURL+"/v1/streams/out?"+q.Encode(), true)
	return r, r.readAll(t, want, 15*time.Second, 2*time.Second, true)
}

// TestEgressReplaysByTimeAndByIDAsTheJavaClientSeeks: a reader of a subscription that
// read everything asks again from a time, then from a message id (inside a batch, then
// not batched; each on one partition of a partitioned topic); the bridge replays the
// same messages as the Java client's seek on the same topic (which, for a message inside
// a batch, starts after it).
func TestEgressReplaysByTimeAndByIDAsTheJavaClientSeeks(t *testing.T) {
	f := newSeekFixture(t)
	p := seekBridge(t, f)
	all := f.all()
	for _, c := range []struct {
		name, sub, position string
		seekTime            int64
		seekID              string
	}{
		{"by time", "replay-time", f.between.UTC().Format(time.RFC3339Nano), f.between.UnixMilli(), ""},
		{"by id inside a batch", "replay-id", "id:" + idText(f.target.ID), 0, idText(f.target.ID)},
		{"by id not batched", "replay-single", "id:" + idText(f.single.ID), 0, idText(f.single.ID)},
	} {
		java := f.javaReplay(t, "java-"+c.sub, c.seekTime, c.seekID)
		r, recs := readSeekStream(t, p, url.Values{"subscription": {c.sub}, "position": {"earliest"}}, all)
		r.close()
		if len(recs) != all {
			t.Fatalf("%s: the bridge's first read gave %d records, want %d", c.name, len(recs), all)
		}
		r, recs = readSeekStream(t, p, url.Values{"subscription": {c.sub}, "position": {c.position}}, len(java))
		r.close()
		sameReplay(t, c.name, replayOf(recs), java)
		if c.seekTime > 0 && len(java) != len(f.second)+len(f.third) {
			t.Fatalf("by time: the oracle replayed %d messages, want the %d published after %s", len(java), len(f.second)+len(f.third), f.between)
		}
		t.Logf("%s: %d messages replayed by both (position=%s)", c.name, len(java), c.position)
	}
}

// TestEgressSeeksALiveStream: a stream that delivered everything is moved back to a
// time with POST /seek; the same response goes on with what the Java client's seek
// replays, the ids the client held before are no longer acknowledgeable, and the
// replayed ones are.
func TestEgressSeeksALiveStream(t *testing.T) {
	f := newSeekFixture(t)
	p := seekBridge(t, f)
	all := f.all()
	java := f.javaReplay(t, "java-live", f.between.UnixMilli(), "")
	r, recs := readSeekStream(t, p, url.Values{"subscription": {"live"}, "position": {"earliest"}, "ack": {"client"}}, all)
	if len(recs) != all {
		t.Fatalf("the stream gave %d records before the seek, want %d", len(recs), all)
	}
	body := fmt.Sprintf(`{"time":%q}`, f.between.UTC().Format(time.RFC3339Nano))
	st, m := postAck(t, p.DataURL+"/v1/streams/out/seek", r.sid, "application/json", []byte(body))
	if st != 200 || m["stale"] != float64(all) {
		t.Fatalf("POST /seek: %d %v, want 200 with %d stale ids", st, m, all)
	}
	after := r.readAll(t, len(java), 15*time.Second, 2*time.Second, true)
	sameReplay(t, "live seek", replayOf(after), java)
	ids, _ := json.Marshal([]string{recs[0].MessageID})
	if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", r.sid, "application/json", ids); st != 400 {
		t.Fatalf("ack of an id delivered before the seek: %d %v, want 400 (unknown)", st, m)
	}
	var replayedIDs []string
	for _, rec := range after {
		replayedIDs = append(replayedIDs, rec.MessageID)
	}
	ids, _ = json.Marshal(replayedIDs)
	if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", r.sid, "application/json", ids); st != 200 || m["acked"] != float64(len(after)) {
		t.Fatalf("ack of the replayed ids: %d %v", st, m)
	}
	if e := r.err.Load(); e != nil {
		t.Fatalf("the response ended: %v", e)
	}
	t.Logf("live seek: %d messages again on the same response, as the Java client's seek", len(after))
}
