package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/client"
)

func newSubscriber(t *testing.T, o client.SubscriberOptions) *client.Subscriber {
	t.Helper()
	if o.Backoff == (client.Backoff{}) {
		o.Backoff = fastBackoff
	}
	s, err := client.NewSubscriber(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A response cut in the middle: the Subscriber reconnects, the messages the cut response
// delivered come again on the new one, and acknowledging them by the old response is
// refused without a request (ErrResponseEnded); acknowledged on the new one, every message
// is acknowledged once, and no acknowledgement ever went to an ended response.
func TestSubscriberReconnectsAndAcksEachMessageOnceOnTheResponseThatHoldsIt(t *testing.T) {
	for _, envelope := range []bool{true, false} {
		t.Run(map[bool]string{true: "envelope=json", false: "positions"}[envelope], func(t *testing.T) {
			f := newFakeEgress(t, 20)
			f.envelope = envelope
			f.cutAfter = func(n int) int {
				if n == 0 {
					return 6
				}
				return 0
			}
			f.cutOnceAcked = 3
			o := client.SubscriberOptions{URL: f.url(), Ack: client.AckClient}
			if envelope {
				o.Envelope = "json"
			}
			s := newSubscriber(t, o)
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var held []*client.Message
			for {
				m, err := s.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if envelope && m.ID == "" {
					t.Fatalf("message without its id: %s", m.Data)
				}
				if m.StreamID == "stream-0" && m.Position >= 3 {
					held = append(held, m) // acknowledged only once the response has ended
					continue
				}
				if len(held) > 0 {
					err := s.Ack(ctx, held...)
					if !errors.Is(err, client.ErrResponseEnded) {
						t.Fatalf("Ack of %d messages of the ended response: %v, want ErrResponseEnded", len(held), err)
					}
					held = nil
				}
				if err := s.Ack(ctx, m); err != nil {
					t.Fatalf("Ack(%s at %d of %s): %v", m.ID, m.Position, m.StreamID, err)
				}
				if m.StreamID != "stream-0" && m.Position == 16 { // 20 - 3 acknowledged on stream-0
					break
				}
			}
			f.ackedOnce(t)
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.stale != 0 {
				t.Errorf("%d acknowledgements sent with an ended response's Stream-Id", f.stale)
			}
			if f.lost != 0 {
				t.Errorf("%d acknowledgements without their response's affinity cookie", f.lost)
			}
		})
	}
}

// A broker failure of an acknowledgement (503 with notAcked) is posted again for the ids
// not acknowledged only.
func TestSubscriberPostsAgainOnlyWhatTheBrokerDidNotAcknowledge(t *testing.T) {
	f := newFakeEgress(t, 4)
	f.envelope = true
	f.ack = func(post int, items []string) (int, string) {
		if post == 0 {
			return http.StatusServiceUnavailable, `{"status":503,"acked":0,"failed":"7:2:-1:-1","notAcked":["7:2:-1:-1","7:3:-1:-1"],"error":"broker"}`
		}
		return 0, ""
	}
	// The first post's 7:0 and 7:1 were acknowledged before the broker failed.
	first := f.ack
	f.ack = func(post int, items []string) (int, string) {
		if post == 0 {
			f.mu.Lock()
			f.acked["7:0:-1:-1"], f.acked["7:1:-1:-1"] = 1, 1
			f.mu.Unlock()
		}
		return first(post, items)
	}
	s := newSubscriber(t, client.SubscriberOptions{URL: f.url(), Envelope: "json", Ack: client.AckClient})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ms []*client.Message
	for range 4 {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	if err := s.Ack(ctx, ms...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	f.ackedOnce(t)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.posts) != 2 || !reflect.DeepEqual(f.posts[1], []string{"7:2:-1:-1", "7:3:-1:-1"}) {
		t.Errorf("posts %v, want the notAcked ids posted again", f.posts)
	}
}

// A Stream-Error trailer ends the response; the Subscriber reconnects and reports why. A
// topic that ended (two clean, empty ends) is io.EOF.
func TestSubscriberReconnectsAfterAStreamErrorAndStopsAtTheTopicsEnd(t *testing.T) {
	f := newFakeEgress(t, 2)
	f.trailer = func(n int) string {
		if n == 0 {
			return "the consumer failed: topic unloaded"
		}
		return ""
	}
	f.cutAfter = func(int) int { return 0 }
	var causes []string
	s := newSubscriber(t, client.SubscriberOptions{URL: f.url(), Ack: client.AckAuto,
		OnReconnect: func(cause error, _ time.Duration) { causes = append(causes, cause.Error()) }})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 4 { // two on each response: nothing is acknowledged
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(causes) != 1 || !strings.Contains(causes[0], "topic unloaded") {
		t.Errorf("reconnect causes %q, want the Stream-Error", causes)
	}
}

// A response that ends cleanly (a drained bridge) is reopened; two clean ends in a row
// without a record are the end of a terminated topic: io.EOF.
func TestSubscriberEndsWithEOFAtTheEndOfATerminatedTopic(t *testing.T) {
	f := newFakeEgress(t, 3)
	f.endOfTopic = func(int) bool { return true }
	s := newSubscriber(t, client.SubscriberOptions{URL: f.url(), Ack: client.AckClient, Envelope: "json"})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		m, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.StreamID == "stream-0" && m.Position == 2 {
			continue // left unacknowledged: delivered again on the next response
		}
		if err := s.Ack(ctx, m); err != nil && !errors.Is(err, client.ErrResponseEnded) {
			t.Fatal(err)
		}
	}
	f.ackedOnce(t)
}

// A bridge that drains ends its responses cleanly without Stream-End: an idle stream
// through a rolling restart sees several such ends in a row, and they are reconnections,
// never the topic's end.
func TestSubscriberTakesCleanEndsWithoutStreamEndForDrains(t *testing.T) {
	f := newFakeEgress(t, 0)
	f.endClean = func(int) bool { return true }
	var mu sync.Mutex
	reconnects := 0
	s := newSubscriber(t, client.SubscriberOptions{URL: f.url(), Ack: client.AckClient, Envelope: "json",
		Backoff:     client.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		OnReconnect: func(error, time.Duration) { mu.Lock(); reconnects++; mu.Unlock() }})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := s.Next(ctx)
	mu.Lock()
	n := reconnects
	mu.Unlock()
	if !errors.Is(err, context.DeadlineExceeded) || n < 3 {
		t.Fatalf("Next after %d clean ends without Stream-End: %v; want it still waiting (context deadline)", n, err)
	}
}

// A refusal that retrying cannot change (404, 400, 406, 401) ends Next with it.
func TestSubscriberStopsOnARefusal(t *testing.T) {
	f := newFakeEgress(t, 0)
	s := newSubscriber(t, client.SubscriberOptions{URL: f.srv.URL + "/v1/streams/none"})
	defer s.Close()
	_, err := s.Next(context.Background())
	var se *client.StatusError
	if !errors.As(err, &se) || se.Status != 404 {
		t.Fatalf("Next: %v, want the 404", err)
	}
	if !errors.Is(s.Close(), nil) {
		t.Fatal("Close")
	}
	if _, err := s.Next(context.Background()); err == nil || err == io.EOF {
		t.Errorf("Next after the refusal: %v", err)
	}
}

// The stream's query parameters, Message-Accept and a bearer token go with the GET; a
// Nack goes to /nack with the response's Stream-Id.
func TestSubscriberAsksAsConfiguredAndNacksOnTheOpenResponse(t *testing.T) {
	f := newFakeEgress(t, 2)
	f.envelope = true
	s := newSubscriber(t, client.SubscriberOptions{URL: f.url(), Subscription: "sub-1", Position: "earliest", Ack: client.AckClient,
		Envelope: "json", MessageAccept: "application/json", Token: client.StaticToken("t0k")})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Nack(ctx, m); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gets[0]
	q := g.URL.Query()
	if q.Get("subscription") != "sub-1" || q.Get("position") != "earliest" || q.Get("ack") != "client" || q.Get("envelope") != "json" ||
		g.Header.Get("Message-Accept") != "application/json" || g.Header.Get("Authorization") != "Bearer t0k" || g.Header.Get("Accept") != "application/recordio" {
		t.Errorf("GET %s with %v", g.URL, g.Header)
	}
	if f.nacked[m.ID] != 1 || f.acked[m.ID] != 0 {
		t.Errorf("%s nacked %d times, acked %d", m.ID, f.nacked[m.ID], f.acked[m.ID])
	}
}
