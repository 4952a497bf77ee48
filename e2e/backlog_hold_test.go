package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestBacklogQuotaHoldKeepsMessagesPending (producer_request_hold, on
// the real broker): once the backlog is over quota the broker refuses the producer's
// registration (after a topic unload); a message sent meanwhile neither fails nor fails
// the producer: it waits, pending, and is persisted by the SAME producer once the
// backlog is cleared.
func TestBacklogQuotaHoldKeepsMessagesPending(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "hold")
	b.MustAdmin(t, http.MethodPost, "/admin/v2/namespaces/"+ns+"/backlogQuota?backlogQuotaType=destination_storage",
		[]byte(`{"limitSize":1024,"limitTime":-1,"policy":"producer_request_hold"}`))
	topic := "persistent://" + ns + "/" + broker.Name("hold")
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 3 * time.Minute,
		Backoff: pulsar.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	publishers := func() int {
		return len(getTopicStats(t, b, topic).Publishers)
	}
	payload := bytes.Repeat([]byte("b"), 2048)
	// Fill the backlog (nobody acknowledges), unloading the topic after each message,
	// until a message stays pending while the broker lists no publisher: the producer
	// is held out by the quota.
	var held chan error
	for held == nil {
		done := make(chan error, 1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, err error) { done <- err })
		for held == nil {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("a send under producer_request_hold failed: %v; want it held", err)
				}
			case <-time.After(2 * time.Second):
				if publishers() == 0 && p.Stats().PendingMessages > 0 {
					held = done
				}
				continue
			case <-ctx.Done():
				t.Fatal("the broker never held the producer out for its backlog quota")
			}
			b.MustAdmin(t, http.MethodPut, adminTopicPath(topic)+"/unload", nil)
			break
		}
	}
	t.Logf("held: %+v", p.Stats())
	// Clear the backlog: the held message is persisted, and the producer goes on.
	b.MustAdmin(t, http.MethodPost, adminTopicPath(topic)+"/subscription/slow/skip_all", nil)
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the held message failed once the backlog cleared: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the held message was not persisted after the backlog cleared")
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after the backlog cleared")}); err != nil {
		t.Fatalf("the producer after the backlog cleared: %v", err)
	}
}

// muteConns is a Dialer whose connections can be muted: from then on, whatever the
// broker sends on them is swallowed (a receipt that never arrives), until they are cut.
type muteConns struct {
	mu    sync.Mutex
	conns []*mutableConn
}

type mutableConn struct {
	net.Conn
	muted atomic.Bool
}

func (c *mutableConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.muted.Load() {
			return n, err
		}
		// Muted: what arrived is dropped; read on until the connection is cut.
	}
}

func (m *muteConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &mutableConn{Conn: nc}
	m.mu.Lock()
	m.conns = append(m.conns, c)
	m.mu.Unlock()
	return c, nil
}

func (m *muteConns) muteAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conns {
		c.muted.Store(true)
	}
}

func (m *muteConns) cutAll() {
	m.mu.Lock()
	conns := m.conns
	m.conns = nil
	m.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// quotaRefusals signals each producer reconnect the broker refused for the backlog quota.
type quotaRefusals chan struct{}

func (h quotaRefusals) Enabled(context.Context, slog.Level) bool { return true }
func (h quotaRefusals) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" && strings.Contains(a.Value.String(), "QuotaExceeded") {
			select {
			case h <- struct{}{}:
			default:
			}
		}
		return true
	})
	return nil
}
func (h quotaRefusals) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h quotaRefusals) WithGroup(string) slog.Handler      { return h }

// Under producer_request_hold the broker can drop a producer after it stored a message
// and before the producer read its receipt (the backlog quota check disconnects every
// producer of a topic over quota; so does an unload or a network cut). The producer
// cannot tell that message from one the broker never got: it holds it while the broker
// refuses the producer for the quota, and sends it again once the backlog clears (the
// official Java and Go clients do the same: at least once). Without deduplication the
// topic then holds it twice; with deduplication and a named producer (the bridge's named
// streams) the broker drops the resend and the topic holds it once. Here the receipt is
// lost for sure: the producer's connection is muted before the message is sent and cut
// once the broker has stored it.
func TestBacklogQuotaHoldResendIsDroppedByDeduplication(t *testing.T) {
	for _, dedup := range []bool{false, true} {
		t.Run(fmt.Sprintf("deduplication=%v", dedup), func(t *testing.T) {
			b := broker.Get(t)
			ns := dedupNamespace(t, b, "holddup", dedup)
			b.MustAdmin(t, http.MethodPost, "/admin/v2/namespaces/"+ns+"/backlogQuota?backlogQuotaType=destination_storage",
				[]byte(`{"limitSize":1024,"limitTime":-1,"policy":"producer_request_hold"}`))
			topic := "persistent://" + ns + "/" + broker.Name("held")
			mute := &muteConns{}
			refused := make(quotaRefusals, 1)
			c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second, Dialer: mute.dial,
				Logger: slog.New(refused)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			opts := pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: -1,
				Backoff: pulsar.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}}
			if dedup {
				opts.Name, opts.Deduplication = broker.Name("held"), true
			}
			p, err := c.CreateProducer(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			seq := func(n int64) *int64 { // the caller's sequence ids, with deduplication only
				if dedup {
					return &n
				}
				return nil
			}
			sub := adminTopicPath(topic) + "/subscription/slow"
			b.MustAdmin(t, http.MethodPut, sub, nil) // a subscription nobody reads: the backlog
			backlog := func() int64 {
				return getSubscriptionStats(t, b, topic, "slow").MsgBacklog
			}
			// 2 KiB over a 1 KiB quota: the backlog is over it from here on.
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: bytes.Repeat([]byte("a"), 2048), SequenceID: seq(0)}); err != nil {
				t.Fatal(err)
			}
			// The message whose receipt is lost.
			mute.muteAll()
			done := make(chan error, 1)
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte("the one"), SequenceID: seq(1)},
				func(_ pulsar.MessageID, err error) { done <- err })
			for backlog() < 2 {
				if ctx.Err() != nil {
					t.Fatal("the broker did not store the second message")
				}
				time.Sleep(50 * time.Millisecond)
			}
			mute.cutAll()
			// The producer reconnects and is refused for the quota: the message is held.
			select {
			case <-refused:
			case err := <-done:
				t.Fatalf("the message was settled (%v) before the backlog cleared; want it held", err)
			case <-ctx.Done():
				t.Fatal("the broker never refused the producer for its backlog quota")
			}
			if n := p.Stats().PendingMessages; n != 1 {
				t.Fatalf("%d messages pending while held; want the one whose receipt was lost", n)
			}
			// Clear the backlog: the producer registers and sends the held message again.
			b.MustAdmin(t, http.MethodPost, sub+"/skip_all", nil)
			cleared := time.Now()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the held message failed once the backlog cleared: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("the held message was not settled after the backlog cleared")
			}
			// With deduplication the broker's own deduplication cursor still holds the
			// backlog over the quota until its next backlog check moves it (every
			// backlogQuotaCheckIntervalInSeconds, 60 s by default): a figure, not a bound.
			t.Logf("settled %s after the backlog was cleared", time.Since(cleared).Round(time.Millisecond))
			copies := 0
			for _, m := range readAll(t, newOfficialClient(t, b), topic, 3*time.Second) {
				if string(m.Payload()) == "the one" {
					copies++
				}
			}
			want := 2 // the resend stored again: at least once
			if dedup {
				want = 1 // the broker dropped the resend
			}
			t.Logf("deduplication %v: the message whose receipt was lost is stored %d time(s)", dedup, copies)
			if copies != want {
				t.Fatalf("deduplication %v: %d copies of the resent message on the topic; want %d", dedup, copies, want)
			}
		})
	}
}
