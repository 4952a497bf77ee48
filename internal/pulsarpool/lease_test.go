package pulsarpool

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

const leaseTopic = "persistent://public/default/leased"

func leaseMsg(seq int64) ingress.Message {
	return ingress.Message{Topic: leaseTopic, Producer: "recordio-bridge/r/s", Sequence: seq, Payload: []byte(strconv.FormatInt(seq, 10))}
}

// storedOnPartitions is what the topic's n partitions hold: payload@producer, sorted.
// claimStream claims the stream recordio-bridge/r/s on p, as its request would.
func claimStream(t *testing.T, p *Pool) func() {
	t.Helper()
	release, err := p.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// wantStored fails unless the lease topic's 5 partitions hold exactly want (see
// storedOnPartitions): the lease itself sends nothing.
func wantStored(t *testing.T, b *pulsartest.Broker, want ...string) {
	t.Helper()
	if got := storedOnPartitions(b, leaseTopic, 5); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("stored %q; want %q", got, want)
	}
}

func storedOnPartitions(b *pulsartest.Broker, topic string, n int) []string {
	var out []string
	for i := range n {
		for _, m := range b.Messages(topic + "-partition-" + strconv.Itoa(i)) {
			out = append(out, string(m.Payload)+"@"+m.Producer)
		}
	}
	slices.Sort(out)
	return out
}

// Partitions are added while a named stream's request is open on one bridge process:
// the stream's next request on another process reads the new count, so its producers'
// names (…@5) are not the open request's (…@3) and the broker would let both write. The
// stream's lease (its name without the count, on partition 0) refuses the second
// request (ProducerBusy, a temporary failure: 503) until the first has ended; then it
// is accepted.
func TestNamedStreamOnAnotherProcessIsRefusedWhilePartitionsAreAdded(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.UniqueProducerNames(true)
	b.SetPartitions(leaseTopic, 3)
	a, evA := newPool(t, newClient(t, b.URL()), Options{})
	other, _ := newPool(t, newClient(t, b.URL()), Options{CreateRetryMin: time.Nanosecond})
	releaseA := claimStream(t, a)
	defer releaseA()
	if _, err := publishMsg(t, a, leaseMsg(0)); err != nil {
		t.Fatal(err)
	}
	b.SetPartitions(leaseTopic, 5)

	releaseB := claimStream(t, other)
	_, err := publishMsg(t, other, leaseMsg(1))
	if !errors.Is(err, ingress.ErrUnavailable) || !strings.Contains(err.Error(), "already connected") {
		t.Fatalf("the stream's record on another process while the first holds it: %v; want ErrUnavailable naming the broker's ProducerBusy", err)
	}
	releaseB()
	if got := storedOnPartitions(b, leaseTopic, 5); len(got) != 1 {
		t.Fatalf("stored %q; want record 0 alone (the refused request wrote nothing)", got)
	}
	if _, err := publishMsg(t, a, leaseMsg(1)); err != nil {
		t.Fatalf("the first request goes on: %v", err)
	}

	releaseA()
	evA.await(t, "closed", 1)
	releaseB = claimStream(t, other)
	defer releaseB()
	if _, err := publishMsg(t, other, leaseMsg(2)); err != nil {
		t.Fatalf("the stream's next request on the other process, once the first ended: %v", err)
	}
	wantStored(t, b, "0@recordio-bridge/r/s@3", "1@recordio-bridge/r/s@3", "2@recordio-bridge/r/s@5")
}

// The lease reconnects like any producer. When its connection is lost and another
// process takes the stream meanwhile, its registration is refused (ProducerBusy): it
// fails for good, and the first request's next record on the topic fails (503), unsent,
// instead of being written next to the other process's.
func TestNamedStreamWhoseLeaseWasTakenOnReconnectStopsWriting(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.UniqueProducerNames(true)
	b.SetPartitions(leaseTopic, 3)
	lease := leaseTopic + "-partition-0"
	var taken atomic.Bool
	// The first process's lease cannot register again (a re-registration: epoch above 0)
	// until the other process holds the name.
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if p := c.Cmd.GetProducer(); c.Cmd.GetType() == pulsartest.CommandProducer && p.GetTopic() == lease &&
			p.GetProducerName() == "recordio-bridge/r/s" && p.GetEpoch() > 0 && !taken.Load() {
			return pulsartest.Refuse(pulsartest.ErrServiceNotReady, "not yet")
		}
		return pulsartest.Pass()
	})
	backoff := pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	a, _ := newPool(t, newClient(t, b.URL()), Options{Producer: pulsar.ProducerOptions{Backoff: backoff}})
	other, _ := newPool(t, newClient(t, b.URL()), Options{})
	releaseA := claimStream(t, a)
	defer releaseA()
	if _, err := publishMsg(t, a, leaseMsg(0)); err != nil {
		t.Fatal(err)
	}
	b.CloseProducers() // every registration lost, as when a connection drops
	b.SetPartitions(leaseTopic, 5)
	releaseB := claimStream(t, other)
	defer releaseB()
	if _, err := publishMsg(t, other, leaseMsg(1)); err != nil {
		t.Fatalf("the other process, its lease free: %v", err)
	}
	taken.Store(true)

	a.mu.Lock()
	var e *producerEntry
	for _, x := range a.m {
		e = x
	}
	a.mu.Unlock()
	if e == nil || e.lease == nil {
		t.Fatal("the first process holds no lease")
	}
	deadline := time.Now().Add(wait)
	for !errors.Is(e.lease.Err(), pulsar.ErrProducerFailed) {
		if time.Now().After(deadline) {
			t.Fatalf("the first process's lease: %v; want it failed, its name taken", e.lease.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := publishMsg(t, a, leaseMsg(1))
	if !errors.Is(err, ingress.ErrUnavailable) || !strings.Contains(err.Error(), "lost its lease") {
		t.Fatalf("the first request's next record: %v; want ErrUnavailable, the lease lost", err)
	}
	if _, err := publishMsg(t, other, leaseMsg(2)); err != nil {
		t.Fatalf("the other process goes on: %v", err)
	}
	wantStored(t, b, "0@recordio-bridge/r/s@3", "1@recordio-bridge/r/s@5", "2@recordio-bridge/r/s@5")
}

// With exclusiveWithFencing a named stream needs no lease (fencing is topic-wide), and
// an unpartitioned topic none (its producer's name has no count): neither registers a
// producer beyond the stream's.
func TestNamedStreamTakesNoLeaseWhereItsNameSuffices(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions int
		mode       pulsar.ProducerAccessMode
		want       int
	}{
		{"partitioned shared", 3, pulsar.AccessShared, 4},
		{"partitioned exclusiveWithFencing", 3, pulsar.AccessExclusiveWithFencing, 3},
		{"unpartitioned shared", 0, pulsar.AccessShared, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fakeBroker(t)
			b.SetDeduplication(true)
			if tc.partitions > 0 {
				b.SetPartitions(leaseTopic, tc.partitions)
			}
			ps, _ := newPool(t, newClient(t, b.URL()), Options{NamedAccessMode: tc.mode})
			release := claimStream(t, ps)
			defer release()
			if _, err := publishMsg(t, ps, leaseMsg(0)); err != nil {
				t.Fatal(err)
			}
			if n := b.Frames(pulsartest.CommandProducer); n != tc.want {
				t.Fatalf("%d registrations; want %d", n, tc.want)
			}
		})
	}
}

// A lease whose registration is lost registers again, as the stream's producers do, and
// its reconnect is counted with theirs (bridge_pulsar_reconnects), also once it closed.
func TestNamedStreamLeaseReconnectsAndIsCounted(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.UniqueProducerNames(true)
	b.SetPartitions(leaseTopic, 3)
	ps, ev := newPool(t, newClient(t, b.URL()), Options{})
	release := claimStream(t, ps)
	if _, err := publishMsg(t, ps, leaseMsg(0)); err != nil {
		t.Fatal(err)
	}
	b.CloseProducers()
	deadline := time.Now().Add(wait)
	for ps.Stats().ProducerReconnects < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("reconnects counted %d; want 4 (3 partition producers and the lease)", ps.Stats().ProducerReconnects)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := publishMsg(t, ps, leaseMsg(1)); err != nil {
		t.Fatalf("after the reconnects: %v", err)
	}
	release()
	ev.await(t, "closed", 1)
	if n := ps.Stats().ProducerReconnects; n != 4 {
		t.Fatalf("reconnects counted %d once the producers closed; want 4", n)
	}
	other, _ := newPool(t, newClient(t, b.URL()), Options{})
	releaseB := claimStream(t, other)
	defer releaseB()
	if _, err := publishMsg(t, other, leaseMsg(2)); err != nil {
		t.Fatalf("another process once the lease closed: %v", err)
	}
}
