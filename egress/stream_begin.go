package egress

import (
	"context"
	"net/http"
	"sync"

	"github.com/recordio-bridge/bridge/recordio"
)

// begin writes the answer's head and flushes it.
func (st *stream) begin() error {
	res := st.c.Response()
	h := res.Header()
	h.Set("Content-Type", recordio.MediaRecordIO)
	h.Set("Message-Content-Type", st.recordType)
	h.Set("Stream-Id", st.id)
	h.Set("Trailer", trailerStreamEnd+", "+trailerStreamError)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	res.WriteHeader(http.StatusOK)
	return st.flush()
}

// startHelpers starts the stream's dead-letter goroutine (with dead-letter topics) and
// its ack timeouts' goroutine (ack=client), and returns what stops them and waits for
// them: the ack timeouts' first, as it feeds the dead letters.
func (st *stream) startHelpers(ctx context.Context) (stop func()) {
	var stops []func()
	if st.asides != nil {
		// The dead-letter goroutine is the stream's: it ends after the ack timeouts'
		// goroutine, which feeds it, and before the stream closes the subscription,
		// once it has settled what was queued (dead-lettered, or sent back for
		// redelivery when the publication fails: at once when the client or the
		// server is gone, which cancels ctx).
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.deadLetters(ctx, done)
		}()
		stops = append(stops, func() {
			close(done)
			wg.Wait()
		})
	}
	if st.opts.ack == "client" {
		// The ack timeouts' goroutine is the stream's: it ends before the stream closes
		// the subscription it nacks on (it never waits on a dead-letter topic itself).
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.expireAcks(ctx, done)
		}()
		stops = append(stops, func() {
			close(done)
			wg.Wait()
		})
	}
	return func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
}
