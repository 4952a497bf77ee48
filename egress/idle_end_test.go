package egress

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// openStreams is how many streams the server lists as open.
func openStreams(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// waitOpen waits until the server lists n open streams.
func waitOpen(t *testing.T, s *Server, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for openStreams(s) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d streams open, want %d", what, openStreams(s), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAnIdleStreamEndsWhenItsClientGoesAndWhenTheServerDrains: an idle stream's handler
// waits in its consumer's Receive with its setup returned (start, then serve): a client
// that goes while the stream is idle ends it and closes its subscription, and a drain
// ends the idle streams still open, each within the drain's deadline.
func TestAnIdleStreamEndsWhenItsClientGoesAndWhenTheServerDrains(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery)}
	s, url := serveStreamsOn(t, f, "streams:\n  - name: s\n    topics: [t]\n")
	get := func() *http.Response {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s", nil)
		req.Header.Set("Accept", "application/recordio")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp
	}
	gone := get()
	waitOpen(t, s, 1, "a GET answered")
	gone.Body.Close() // the client goes while the stream is idle
	waitOpen(t, s, 0, "the idle stream's client went")
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if !closed {
		t.Fatal("the subscription of the stream whose client went was not closed")
	}

	kept := []*http.Response{get(), get()}
	waitOpen(t, s, 2, "two GETs answered")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("the drain of two idle streams: %v", err)
	}
	for i, resp := range kept {
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, resp.Body)
			done <- err
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("idle stream %d's response did not end after the drain", i)
		}
		resp.Body.Close()
	}
	if n := openStreams(s); n != 0 {
		t.Fatalf("%d streams open after the drain", n)
	}
}
