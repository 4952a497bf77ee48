package egress

import (
	"bufio"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/stacktest"
)

func TestAnIdleStreamRunsNoGoroutineOfItsOwnBeyondItsConnection(t *testing.T) {
	// Each idle GET costs its connection's goroutines (net/http's handler and its
	// background read, the client's read and write loops here) and nothing more: a
	// stream that waited for the drain on a goroutine of its own paid its stack while
	// idle, for every stream open.
	f := &fakeSub{feed: make(chan *Delivery)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n")
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	before := runtime.NumGoroutine()
	const n = 8
	for range n {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s", nil)
		req.Header.Set("Accept", "application/recordio")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	time.Sleep(100 * time.Millisecond) // the server's background reads start
	if added := runtime.NumGoroutine() - before; added > 4*n+2 {
		t.Fatalf("%d idle streams added %d goroutines, more than the 4 each of their connections", n, added)
	}
}

func TestAnIdleStreamsHandlerStackShrinksToHalf(t *testing.T) {
	// An idle stream's handler waits in Receive for as long as the stream is open; the
	// runtime halves a parked goroutine's 16 KiB stack at a collection only when less
	// than 4 KiB of it is in use. With the stream's setup (some 1.6 KiB of frame) still
	// on the stack below the wait, every idle stream kept 16 KiB of stack instead of 8.
	// The streams are read over bare connections, so the client runs no goroutine.
	if raceOn {
		t.Skip("the race detector's instrumentation makes frames larger than a production build's")
	}
	f := &fakeSub{feed: make(chan *Delivery)}
	const n = 50
	_, url := serveStreamsWith(t, f, "streams:\n  - name: s\n    topics: [t]\n", Limits{MaxStreams: n, WriteTimeout: 5 * time.Second})
	stacks := stacktest.BytesAfterGC
	before := stacks()
	for range n {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := io.WriteString(conn, "GET /v1/streams/s HTTP/1.1\r\nHost: bridge\r\nAccept: application/recordio\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	// The handler's 8 KiB and the background read's 2 KiB, with room for the test's own
	// goroutines; a handler that keeps 16 KiB makes it 18 or more. A stack is not shrunk
	// by a collection that finds its goroutine running, so the least of a few tries.
	perStream := math.Inf(1)
	for try := 0; try < 10 && perStream > 14; try++ {
		time.Sleep(50 * time.Millisecond) // the handlers reach their wait
		perStream = min(perStream, (float64(stacks())-float64(before))/n/1024)
	}
	if perStream > 14 {
		t.Fatalf("each idle stream holds %.1f KiB of goroutine stacks, want 10 (the handler's 8 KiB and the connection's background read's 2)", perStream)
	}
	t.Logf("%.1f KiB of goroutine stacks per idle stream", perStream)
}
