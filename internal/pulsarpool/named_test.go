package pulsarpool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
)

// publishMsg sends one record and waits for its outcome.
func publishMsg(t *testing.T, ps *Pool, m ingress.Message) (string, error) {
	t.Helper()
	type res struct {
		id  string
		err error
	}
	ch := make(chan res, 1)
	ps.PublishAsync(context.Background(), &m, func(id string, err error) { ch <- res{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-time.After(wait):
		t.Fatal("no outcome")
	}
	return "", nil
}

func TestNamedStreamsAreClaimedOneRequestAtATime(t *testing.T) {
	ps := New(newClient(t, fakeBroker(t).URL()), Options{CreateTimeout: wait, IdleTimeout: time.Minute})
	defer ps.Close()
	release, err := ps.ClaimStream("p1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.ClaimStream("p1"); !errors.Is(err, ingress.ErrStreamBusy) {
		t.Fatalf("second claim: %v, want ErrStreamBusy", err)
	}
	other, err := ps.ClaimStream("p2")
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	other()
	release()
	release() // twice is harmless
	again, err := ps.ClaimStream("p1")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
	if _, err := publishMsg(t, ps, ingress.Message{Topic: "t", Producer: "p1", Payload: []byte("x")}); !errors.Is(err, ingress.ErrUnavailable) {
		t.Fatalf("an unclaimed stream's record: %v, want ErrUnavailable", err)
	}
}

// Each named stream has producers of its own (named for the broker's deduplication), and
// a resent record is answered ErrDuplicate.
func TestNamedStreamPublishesWithItsSequenceAndReportsDuplicates(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	ps := New(newClient(t, b.URL()), Options{CreateTimeout: wait, IdleTimeout: time.Minute})
	defer ps.Close()
	release, _ := ps.ClaimStream("bridge/r/s")
	defer release()
	for i, seq := range []int64{4, 5, 5, 4, 6} {
		_, err := publishMsg(t, ps, ingress.Message{Topic: "persistent://public/default/t", Producer: "bridge/r/s", Sequence: seq, Payload: []byte{byte(seq)}})
		if dup := i == 2 || i == 3; dup != errors.Is(err, ingress.ErrDuplicate) || (!dup && err != nil) {
			t.Fatalf("record %d (sequence %d): %v, want duplicate = %v", i, seq, err, dup)
		}
	}
	if _, err := publishMsg(t, ps, ingress.Message{Topic: "persistent://public/default/t", Payload: []byte("unnamed")}); err != nil {
		t.Fatal(err)
	}
	msgs := b.Messages("persistent://public/default/t")
	if len(msgs) != 4 {
		t.Fatalf("broker holds %d messages, want 4 (4, 5, 6 once, and the unnamed one)", len(msgs))
	}
	for i, want := range []uint64{4, 5, 6} {
		if msgs[i].Producer != "bridge/r/s" || msgs[i].SequenceID != want {
			t.Errorf("message %d: producer %q sequence %d, want bridge/r/s %d", i, msgs[i].Producer, msgs[i].SequenceID, want)
		}
	}
	if msgs[3].Producer == "bridge/r/s" {
		t.Error("the unnamed record went through the stream's producer")
	}
}

// The trap: after a record of a named stream fails for now on a topic, no later record
// of the same claim may reach that topic (the broker would drop the failed one as a
// duplicate once resent); other topics go on, and a new claim starts afresh.
func TestNamedStreamStopsOnATopicAtItsFirstTemporaryFailure(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	ps := New(newClient(t, b.URL()), Options{CreateTimeout: wait, IdleTimeout: time.Minute,
		Producer: pulsar.ProducerOptions{SendTimeout: 200 * time.Millisecond}})
	defer ps.Close()
	const topic, other = "persistent://public/default/a", "persistent://public/default/b"
	release, _ := ps.ClaimStream("n")
	if _, err := publishMsg(t, ps, ingress.Message{Topic: topic, Producer: "n", Sequence: 0, Payload: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	b.HoldReceipts(true)
	if _, err := publishMsg(t, ps, ingress.Message{Topic: topic, Producer: "n", Sequence: 1, Payload: []byte("1")}); !errors.Is(err, ingress.ErrUnavailable) {
		t.Fatalf("record 1: %v, want ErrUnavailable (send timeout)", err)
	}
	b.HoldReceipts(false)
	if _, err := publishMsg(t, ps, ingress.Message{Topic: topic, Producer: "n", Sequence: 2, Payload: []byte("2")}); !errors.Is(err, ingress.ErrUnavailable) {
		t.Fatalf("record 2 after 1 failed: %v, want ErrUnavailable without being sent", err)
	}
	if _, err := publishMsg(t, ps, ingress.Message{Topic: other, Producer: "n", Sequence: 3, Payload: []byte("3")}); err != nil {
		t.Fatalf("record 3 on another topic: %v", err)
	}
	release()
	release, _ = ps.ClaimStream("n")
	defer release()
	for seq := int64(1); seq <= 2; seq++ {
		_, err := publishMsg(t, ps, ingress.Message{Topic: topic, Producer: "n", Sequence: seq, Payload: []byte{'0' + byte(seq)}})
		if err != nil && !errors.Is(err, ingress.ErrDuplicate) {
			t.Fatalf("resent record %d: %v", seq, err)
		}
	}
	var got []string
	for _, m := range b.Messages(topic) {
		got = append(got, string(m.Payload))
	}
	// The fake broker persisted record 1 before its receipt was held, so the resent 1 is
	// a duplicate; 2 was never sent before the resend.
	if len(got) != 3 || got[0] != "0" || got[1] != "1" || got[2] != "2" {
		t.Fatalf("topic holds %q, want [0 1 2]", got)
	}
}
