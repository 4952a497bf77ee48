package app

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestEgressRecordsAreIntactWhileFramesAreReused: egress streams reading batches from
// the broker (1 KiB messages, 16 to a frame) write every record as it was published
// while the frames they came in are given back for reuse as their messages are settled
// (filled with poison when given back here, so a record read from a released frame
// shows it): with ack=auto, with ack=client acknowledging and negatively acknowledging
// by position while the stream writes, across a reconnection to the broker, and when a
// client goes away with records unacknowledged.
func TestEgressRecordsAreIntactWhileFramesAreReused(t *testing.T) {
	defer pulsartest.PoisonReleasedFrames(pulsartest.PoisonReleasedFrames(true))
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	writeConfig(t, path, b.URL(), "streams:\n  - name: s\n    topics: [reuse]\n  - name: c\n    topics: [reuse-client]\n    subscription: c\n    ack: client\n    maxUnacked: 100000\n")
	a, err := New(Options{ConfigPath: path, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	base := "http://" + a.DataAddr().String() + "/v1/streams/"
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	// Each stream its own topic: the fake broker's queue is the topic's, and the first
	// stream's consumer may still be subscribed when the second's messages come.
	const perBatch = 16
	payload := func(tag string, i int) []byte {
		return bytes.Repeat(fmt.Appendf(nil, "%s-%05d|", tag, i), 1024/(len(tag)+7))[:1000]
	}
	deliver := func(topic, tag string, from, n int) {
		for i := from; i < from+n; i += perBatch {
			msgs := make([]pulsartest.BatchMessage, perBatch)
			for j := range msgs {
				msgs[j].Payload = payload(tag, i+j)
			}
			b.DeliverBatch(topic, 0, 0, msgs...)
		}
	}
	// read checks the next n records against tag's payloads from, in order; onRecord
	// runs after each (with its position).
	read := func(rd *recordio.Reader, tag string, from, n int, onRecord func(pos int)) {
		t.Helper()
		for i := from; i < from+n; i++ {
			rec, err := rd.Next()
			if err != nil {
				t.Fatalf("%s: record %d: %v", tag, i, err)
			}
			if want := payload(tag, i); !bytes.Equal(rec, want) {
				t.Fatalf("%s: record %d reads %.24q..., want %.24q... (poison: written from a frame given back)", tag, i, rec, want)
			}
			if onRecord != nil {
				onRecord(i)
			}
		}
	}
	open := func(stream string) (*recordio.Reader, string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+stream, nil)
		req.Header.Set("Accept", "application/recordio")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", stream, resp.Status)
		}
		return recordio.NewReader(resp.Body), resp.Header.Get("Stream-Id"), func() { cancel(); resp.Body.Close() }
	}
	post := func(streamID, what string, through int) {
		req, _ := http.NewRequest(http.MethodPost, base+"c/"+what+"?through="+strconv.Itoa(through), nil)
		req.Header.Set("Stream-Id", streamID)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s?through=%d: %s", what, through, resp.Status)
		}
	}

	// ack=auto, with the broker's connection dropped halfway (once what was sent is read:
	// the fake broker sends nothing again).
	rd, _, done := open("s")
	deliver("persistent://public/default/reuse", "auto", 0, 800)
	read(rd, "auto", 0, 800, nil)
	b.DropConnections()
	deliver("persistent://public/default/reuse", "auto", 800, 800)
	read(rd, "auto", 800, 800, nil)
	done()

	// ack=client: every 32 records acknowledged or negatively acknowledged by position
	// while the stream goes on writing; the last ones left unacknowledged when the
	// client goes away.
	rd, id, done := open("c")
	deliver("persistent://public/default/reuse-client", "client", 0, 1600)
	read(rd, "client", 0, 1600, func(pos int) {
		if pos%32 == 31 && pos < 1500 {
			what := "ack"
			if pos%64 == 63 {
				what = "nack"
			}
			post(id, what, pos)
		}
	})
	done()
}
