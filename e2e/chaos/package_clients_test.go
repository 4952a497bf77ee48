package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/client"
)

// The load's clients built on the client package instead of the suite's own: a named
// stream published by a client.Publisher (one long request, resumed by the package after
// every failure) and an acknowledging reader that is a client.Subscriber. They keep the
// same books as ingressClient and ackingEgress, so the scenario's judges read them alike.

// runPackage is run's load through a client.Publisher: a record every pace until stop,
// then Close, which waits until every record has its outcome.
func (c *ingressClient) runPackage(ctx context.Context, stop <-chan struct{}) {
	h := http.Header{}
	h.Set("X-Topic", c.topic)
	sentAt := map[uint64]int64{}
	p, err := client.NewPublisher(client.PublisherOptions{
		URL:            c.url,
		StreamName:     c.stream,
		Header:         h,
		HTTPClient:     ingressHTTP,
		ReceiptTimeout: stallTimeout,
		Backoff:        client.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second},
		OnReceipt: func(r client.Receipt) {
			c.mu.Lock()
			defer c.mu.Unlock()
			id := fmt.Sprintf("%s-%06d", c.key, r.Sequence)
			if r.Outcome == client.Refused {
				c.failures[fmt.Sprintf("%d: %v (refused for good)", r.Status, r.Err)]++
				return
			}
			if r.Outcome == client.Duplicate {
				c.dupAnswers++
			}
			if _, again := c.receipted[id]; !again {
				c.receipted[id] = r.MessageID
			}
			c.noteReceiptLocked(sentAt[r.Sequence], time.Now().UnixNano())
			delete(sentAt, r.Sequence)
		},
		OnRetry: func(next uint64, cause error, _ time.Duration) {
			msg := cause.Error()
			if len(msg) > 160 {
				msg = msg[:160]
			}
			c.mu.Lock()
			c.failures[msg]++
			c.mu.Unlock()
		},
	})
	if err != nil {
		panic(err)
	}
	defer func() {
		st := p.Stats()
		c.mu.Lock()
		c.requests = int(st.Requests)
		c.mu.Unlock()
	}()
	tick := time.NewTicker(c.pace)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = p.Close(cctx)
			return
		case <-stop:
			if err := p.Close(ctx); err != nil {
				c.mu.Lock()
				c.failures["client: close: "+err.Error()]++
				c.mu.Unlock()
			}
			return
		case <-tick.C:
		}
		c.mu.Lock()
		n := c.next
		c.next++
		c.peak = max(c.peak, c.next-len(c.receipted))
		sentAt[uint64(n)] = time.Now().UnixNano()
		c.mu.Unlock()
		b, _ := json.Marshal(record{ID: fmt.Sprintf("%s-%06d", c.key, n), K: c.key, N: n})
		if seq, err := p.Publish(ctx, b); err != nil || seq != uint64(n) {
			c.mu.Lock()
			c.failures[fmt.Sprintf("client: publish %d: %v (numbered %d)", n, err, seq)]++
			c.mu.Unlock()
			return
		}
	}
}

// runPackage is run's reading through a client.Subscriber: it acknowledges what it read
// every 100 ms, on the response that delivered it (the package sends the response's
// affinity cookie and Stream-Id); what an ended response delivered comes again.
func (e *ackingEgress) runPackage(ctx context.Context) {
	s, err := client.NewSubscriber(client.SubscriberOptions{
		URL:            e.url,
		MessageAccept:  "application/json",
		StreamEnvelope: true,
		HTTPClient:     ingressHTTP,
		Backoff:        client.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second},
		OnReconnect: func(cause error, _ time.Duration) {
			e.fail(e.errs, "end: "+cause.Error())
		},
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	var pending []*client.Message
	ids := map[*client.Message]string{}
	flush := func() {
		// One Ack per response: the messages of an ended one are refused whole
		// (ErrResponseEnded) and come again; the others are acknowledged.
		byStream := map[string][]*client.Message{}
		for _, m := range pending {
			byStream[m.StreamID] = append(byStream[m.StreamID], m)
		}
		for _, ms := range byStream {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.Ack(actx, ms...)
			cancel()
			notDone := map[string]bool{}
			var ae *client.AckError
			switch {
			case err == nil:
			case errors.As(err, &ae):
				for _, u := range ae.Unknown {
					notDone[u] = true
				}
				e.fail(e.ackFails, fmt.Sprintf("ack %d: %.120s", ae.Status, ae.Message))
			default:
				e.fail(e.ackFails, "ack: "+strings.SplitN(err.Error(), " (", 2)[0])
				e.mu.Lock()
				for _, m := range ms {
					e.unanswered[ids[m]] = true
					delete(ids, m)
				}
				e.mu.Unlock()
				continue
			}
			e.mu.Lock()
			for _, m := range ms {
				if !notDone[m.ID] {
					e.acked[ids[m]] = true
				}
				delete(ids, m)
			}
			e.mu.Unlock()
		}
		pending = pending[:0]
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		nctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		m, err := s.Next(nctx)
		cancel()
		select {
		case <-tick.C:
			flush()
		default:
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				e.fail(e.errs, "subscriber: "+err.Error())
				return
			}
			continue
		}
		if m.ID == "" {
			continue // a heartbeat
		}
		var env struct {
			Payload record `json:"payload"`
		}
		if json.Unmarshal(m.Data, &env) != nil || env.Payload.ID == "" {
			e.fail(e.errs, fmt.Sprintf("record %.100q", m.Data))
			continue
		}
		e.mu.Lock()
		e.seen[env.Payload.ID]++
		e.mu.Unlock()
		ids[m] = env.Payload.ID
		pending = append(pending, m)
	}
}

// TestReplicasBehindHAProxyWithTheClientPackage is TestReplicasBehindHAProxy's scenario
// with the client package's Publisher and Subscriber as the load's clients: each replica
// killed with SIGKILL (two of them twice), broker 2 killed and restarted twice, a topic
// grown from 2 to 4 partitions and the namespace unloaded; nothing receipted lost, nothing
// stored twice, order per key, and every record acknowledged through egress with no
// backlog left.
func TestReplicasBehindHAProxyWithTheClientPackage(t *testing.T) {
	if !full {
		// Eight minutes of the same topology as the short form's own replica scenario:
		// the suite keeps within its time; make chaos runs it (and
		// TestReplicasBehindHAProxyWithTheClientPackage can be run on its own).
		if os.Getenv("CHAOS_CLIENT_PACKAGE") == "" {
			t.Skip("the client package's replica scenario runs in make chaos (CHAOS_FULL=1) or with CHAOS_CLIENT_PACKAGE=1")
		}
	}
	ld := replicaLoad{perTopic: pick(2, 3), egress: 2, pace: pick(100*time.Millisecond, 50*time.Millisecond), pkg: true}
	runReplicaScenario(t, ld, "client package: kill -9 replicas ×5 + broker restart ×2 + unload + partitions 2 → 4", func(m *mixed, gap time.Duration) []func() {
		return []func(){
			func() { m.killReplica(t, 0) },
			func() { m.restartBroker(t) },
			func() { m.killReplica(t, 1) },
			func() { m.unload(t) },
			func() { m.killReplica(t, 2) },
			func() { m.growPartitions(t); time.Sleep(partitionSettle - gap) },
			func() { m.killReplica(t, 0) },
			func() { m.restartBroker(t) },
			func() { m.killReplica(t, 1) },
		}
	})
}
