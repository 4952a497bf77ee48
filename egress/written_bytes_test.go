package egress

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// writtenObs sums what RecordsWritten reports, by stream.
type writtenObs struct {
	nopObserver
	mu             sync.Mutex
	records, bytes map[string]int64
}

func (o *writtenObs) RecordsWritten(stream string, n, bytes int64, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.records[stream] += n
	o.bytes[stream] += bytes
}

func (o *writtenObs) sums(stream string) (int64, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.records[stream], o.bytes[stream]
}

// TestRecordsWrittenCountsThePayloadBytesWhateverTheAckMode: bridge_egress_bytes_total
// counts the payload bytes of the records written on an ack=client stream as on an
// ack=auto one (a client stream lets go of the payload once written, and counted 0).
func TestRecordsWrittenCountsThePayloadBytesWhateverTheAckMode(t *testing.T) {
	for _, ack := range []string{"auto", "client"} {
		t.Run(ack, func(t *testing.T) {
			f := &fakeSub{feed: make(chan *Delivery, 10)}
			obs := &writtenObs{records: map[string]int64{}, bytes: map[string]int64{}}
			_, url := filterServer(t, f, obs, "streams:\n  - name: s\n    topics: [t]\n    ack: "+ack+"\n")
			_, rd := get(t, url+"/v1/streams/s")
			c, whole := newChunked(3, 50<<10)
			f.feed <- &Delivery{ID: "1:0:-1:-1", Payload: bytes.Repeat([]byte("a"), 1000)}
			f.feed <- &Delivery{ID: "1:1:-1:-1", Payload: bytes.Repeat([]byte("b"), 40<<10)} // written through
			f.feed <- &Delivery{ID: "1:2:-1:-1", Body: c.r, Size: int64(len(whole))}
			for range 3 {
				if _, err := rd.Next(); err != nil {
					t.Fatal(err)
				}
			}
			want := int64(1000 + 40<<10 + len(whole))
			deadline := time.Now().Add(5 * time.Second)
			for {
				n, b := obs.sums("s")
				if n == 3 && b == want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("ack=%s: %d records of %d bytes reported written, want 3 of %d", ack, n, b, want)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
