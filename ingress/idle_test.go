package ingress

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/stacktest"
	"github.com/recordio-bridge/bridge/recordio"
)

func TestAnIdleStreamsHandlerStackShrinksToHalf(t *testing.T) {
	// An idle stream's handler waits in the body's read for as long as the stream is
	// open; the runtime halves a parked goroutine's 16 KiB stack at a collection only
	// when less than 4 KiB of it is in use. With the stream's setup, its summary and the
	// decoding of a header (some 2.5 KiB of frames) still on the stack below the read,
	// every idle stream kept 16 KiB of stack instead of 8. The streams are written over
	// bare connections, so the client runs no goroutine.
	if raceOn {
		t.Skip("the race detector's instrumentation makes frames larger than a production build's")
	}
	const n = 50
	l := limits
	l.MaxStreams = n
	// Publishing takes 12 KiB of stack on the handler's goroutine, as a busy stream's
	// deepest moment may: its stack grows to 16 KiB, and must come back to 8 once idle.
	_, url := serve(t, deepPublisher{newFake()}, table(t, oneRoute), l)
	stacks := stacktest.BytesAfterGC
	before := stacks()
	rec := recordio.AppendRecord(nil, []byte(`{"n":1}`))
	for i := range n {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		head := "POST /v1/publish/r HTTP/1.1\r\nHost: bridge\r\nContent-Type: application/recordio\r\n" +
			"Message-Content-Type: application/json\r\nAccept: application/recordio\r\nTransfer-Encoding: chunked\r\n\r\n"
		if _, err := fmt.Fprintf(conn, "%s%x\r\n%s\r\n", head, len(rec), rec); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("stream %d: status %d", i, resp.StatusCode)
		}
		receipt, err := recordio.NewReader(resp.Body).Next()
		if err != nil || !strings.Contains(string(receipt), `"status":200`) {
			t.Fatalf("stream %d: receipt %q, %v", i, receipt, err)
		}
	}
	// The handler's 8 KiB and the collector's 4 KiB, with room for the test's own
	// goroutines; a handler that keeps 16 KiB makes it 20. A stack is not shrunk by a
	// collection that finds its goroutine running, so the least of a few tries.
	perStream := math.Inf(1)
	for try := 0; try < 10 && perStream > 16; try++ {
		time.Sleep(50 * time.Millisecond) // the handlers reach their wait
		perStream = min(perStream, (float64(stacks())-float64(before))/n/1024)
	}
	if perStream > 16 {
		t.Fatalf("each idle stream holds %.1f KiB of goroutine stacks, want 12 (the handler's 8 KiB and the collector's 4)", perStream)
	}
	t.Logf("%.1f KiB of goroutine stacks per idle stream", perStream)
}

// deepPublisher publishes with 12 KiB of stack in use on the caller's goroutine.
type deepPublisher struct{ *fakePublisher }

func (d deepPublisher) PublishAsync(ctx context.Context, m *Message, done func(string, error)) {
	if deep(12) == 0 {
		d.fakePublisher.PublishAsync(ctx, m, done)
	}
}

// deep uses about a KiB of stack per level.
//
//go:noinline
func deep(levels int) int {
	var frame [1024]byte
	frame[levels] = byte(levels)
	if levels == 0 {
		return int(frame[0])
	}
	return deep(levels-1) + int(frame[levels]) - levels
}
