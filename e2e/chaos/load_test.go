package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// record is what the load sends: a unique id, its stream (the message key) and its number
// in that stream, so the oracle can check presence, duplicates and order per key.
type record struct {
	ID string `json:"id"`
	K  string `json:"k"`
	N  int    `json:"n"`
}

type receiptMsg struct {
	Seq       int64  `json:"seq"`
	Status    int    `json:"status"`
	MessageID string `json:"messageId"`
	Error     string `json:"error"`
	Summary   bool   `json:"summary"`
	Duplicate bool   `json:"duplicate"`
}

// stallTimeout is how long a client waits for any answer while records are pending.
const stallTimeout = time.Minute

var ingressHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2000, DisableCompression: true}}

// ingressClient is a resuming RecordIO client: it streams records to one route, keeps each
// record until it is receipted and, after any failure (a failed receipt, a broken or ended
// response, a refused request), resends from its first unreceipted record.
type ingressClient struct {
	url, topic, key string
	pace            time.Duration // between new records
	window          int           // records in flight per request
	// stream, when set, is the Stream-Name of every request (an exactly-once named stream):
	// each request's Stream-Sequence is its first record's number, and after a failure the
	// client resends every record from its first unreceipted one on, receipted or not, so
	// the numbers of a request stay consecutive.
	stream string
	// perRequest, when > 0, ends a request's body after that many records (once they are
	// answered) and makes the next one, so a load balancer spreads the streams again.
	perRequest int
	// pkg: the stream is published by a client.Publisher (runPackage) instead.
	pkg bool

	mu         sync.Mutex
	next       int
	queue      []record          // to (re)send, in order
	receipted  map[string]string // record id -> the message id of its receipt
	dupAnswers int               // 200 receipts with "duplicate": true (named streams)
	failures   map[string]int    // per-record failure texts (status: error), counted
	requests   int
	lastOK     atomic.Int64 // unix nanos of the last receipt
	// peak is the most records sent and not yet receipted at once since the last
	// peakSince (records resent after a failure stay unreceipted until their receipt).
	peak int
	// receipts is each 200 receipt's record: when it was (last) sent, when it was receipted.
	receipts []receiptTimes
}

// receiptTimes are unix nanos.
type receiptTimes struct{ sent, got int64 }

func newIngressClient(url, topic, key string, pace time.Duration) *ingressClient {
	return &ingressClient{url: url, topic: topic, key: key, pace: pace, window: 32,
		receipted: map[string]string{}, failures: map[string]int{}}
}

// run streams until stop is closed, then resends until every record is receipted or ctx ends.
func (c *ingressClient) run(ctx context.Context, stop <-chan struct{}) {
	if c.pkg {
		c.runPackage(ctx, stop)
		return
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		stopping := isClosed(stop)
		c.mu.Lock()
		idle := stopping && len(c.queue) == 0
		c.mu.Unlock()
		if idle {
			return
		}
		if c.oneRequest(ctx, stop) {
			backoff = 50 * time.Millisecond
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// oneRequest is one streaming POST; it reports whether any record was receipted.
func (c *ingressClient) oneRequest(ctx context.Context, stop <-chan struct{}) bool {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.url, pr)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", "application/json")
	req.Header.Set("X-Topic", c.topic)
	c.mu.Lock()
	c.requests++
	if c.stream != "" {
		first := c.next
		if len(c.queue) > 0 {
			first = c.queue[0].N
		}
		req.Header.Set("Stream-Name", c.stream)
		req.Header.Set("Stream-Sequence", strconv.Itoa(first))
	}
	c.mu.Unlock()

	receipts := make(chan receiptMsg, 256)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(receipts)
		resp, err := ingressHTTP.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return
		}
		rd := recordio.NewReader(resp.Body)
		for {
			rec, err := rd.Next()
			if err != nil {
				return
			}
			var r receiptMsg
			if json.Unmarshal(rec, &r) != nil {
				return
			}
			receipts <- r
			if r.Summary {
				return
			}
		}
	}()
	// The writer owns pw; records reach it in order through toWrite.
	toWrite := make(chan []byte, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for b := range toWrite {
			if _, err := pw.Write(b); err != nil {
				for range toWrite {
				}
				return
			}
		}
		pw.Close()
	}()
	var sent []record
	var sentAt []int64 // unix nanos, one per sent record
	var settled int
	anyOK := false
	closed := false
	finish := func() {
		if !closed {
			closed = true
			close(toWrite)
		}
	}
	tick := time.NewTicker(c.pace)
	defer tick.Stop()
	// A client gives up on a request that answers nothing for a minute while records wait
	// (the bridge owes a receipt or a 503 within its publish timeout): counted, then resent.
	stall := time.NewTimer(stallTimeout)
	defer stall.Stop()
	defer func() {
		finish()
		pw.CloseWithError(errors.New("request over"))
		pr.CloseWithError(errors.New("request over")) // unblocks a pending Write
		cancel()
		for range receipts {
		}
		wg.Wait()
		// Whatever was not receipted goes back to the front of the queue, in order.
		c.mu.Lock()
		var back []record
		for i, r := range sent {
			if _, ok := c.receipted[r.ID]; !ok {
				if c.stream != "" { // from the first unreceipted one on, consecutively
					back = append(back, sent[i:]...)
					break
				}
				back = append(back, r)
			}
		}
		c.queue = append(back, c.queue...)
		c.mu.Unlock()
	}()
	for {
		var tickC <-chan time.Time
		if !closed && len(sent)-settled < c.window {
			tickC = tick.C
		}
		select {
		case <-ctx.Done():
			return anyOK
		case <-stall.C:
			if settled < len(sent) {
				c.mu.Lock()
				c.failures[fmt.Sprintf("client: no answer for %s with %d records waiting", stallTimeout, len(sent)-settled)]++
				c.mu.Unlock()
				return anyOK
			}
			stall.Reset(stallTimeout)
		case r, ok := <-receipts:
			if !ok {
				return anyOK
			}
			stall.Reset(stallTimeout)
			if r.Summary {
				return anyOK
			}
			if r.Seq < 0 || int(r.Seq) >= len(sent) {
				return anyOK
			}
			settled++
			rec := sent[r.Seq]
			c.mu.Lock()
			if r.Status == http.StatusOK {
				now := time.Now().UnixNano()
				if r.Duplicate {
					c.dupAnswers++
				}
				if _, again := c.receipted[rec.ID]; !again {
					c.receipted[rec.ID] = r.MessageID // "" for a duplicate whose first receipt was lost
				}
				c.receipts = append(c.receipts, receiptTimes{sent: sentAt[r.Seq], got: now})
				c.lastOK.Store(now)
				anyOK = true
			} else {
				c.failures[fmt.Sprintf("%d: %s", r.Status, r.Error)]++
			}
			c.mu.Unlock()
			if r.Status != http.StatusOK {
				// Resend from the first unreceipted record in a new request.
				return anyOK
			}
		case <-tickC:
			c.mu.Lock()
			var rec record
			if c.perRequest > 0 && len(sent) >= c.perRequest {
				c.mu.Unlock()
				if settled == len(sent) {
					finish() // this request's share is answered: end it, the next one is balanced again
				}
				continue
			} else if len(c.queue) > 0 {
				rec, c.queue = c.queue[0], c.queue[1:]
			} else if !isClosed(stop) {
				rec = record{ID: fmt.Sprintf("%s-%06d", c.key, c.next), K: c.key, N: c.next}
				c.next++
				c.peak = max(c.peak, c.next-len(c.receipted))
			} else {
				c.mu.Unlock()
				if settled == len(sent) {
					finish() // nothing left: end the body, the summary ends the response
				}
				continue
			}
			c.mu.Unlock()
			b, _ := json.Marshal(rec)
			sent = append(sent, rec)
			sentAt = append(sentAt, time.Now().UnixNano())
			select {
			case toWrite <- recordio.AppendRecord(nil, b):
			case <-ctx.Done():
				return anyOK
			}
		}
	}
}

// unreceipted is the number of records made but not receipted.
func (c *ingressClient) unreceipted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next - len(c.receipted)
}

// peakSince returns the most records that were sent and not yet receipted at once since
// the last call, and starts counting again from those unreceipted now.
func (c *ingressClient) peakSince() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peak
	c.peak = c.next - len(c.receipted)
	return p
}

// counts is the number of requests made and of failures (failed receipts, stalls) so far.
func (c *ingressClient) counts() (requests, failures int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.failures {
		failures += n
	}
	return c.requests, failures
}

// egressClient reads one egress stream, reconnecting after every end, and records the
// ids it was given.
type egressClient struct {
	url  string
	mu   sync.Mutex
	seen map[string]int
	errs map[string]int // how streams ended (status or error text), counted
}

func newEgressClient(url string) *egressClient {
	return &egressClient{url: url, seen: map[string]int{}, errs: map[string]int{}}
}

func (e *egressClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		e.once(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (e *egressClient) once(ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url, nil)
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", "application/json")
	resp, err := ingressHTTP.Do(req)
	if err != nil {
		e.fail(err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		e.fail(fmt.Sprintf("%d %s", resp.StatusCode, b))
		return
	}
	rd := recordio.NewReader(resp.Body)
	for {
		rec, err := rd.Next()
		if err != nil {
			if ctx.Err() == nil {
				e.fail("end: " + err.Error())
			}
			return
		}
		var r record
		if json.Unmarshal(rec, &r) != nil || r.ID == "" {
			e.fail(fmt.Sprintf("record %q", rec))
			continue
		}
		e.mu.Lock()
		e.seen[r.ID]++
		e.mu.Unlock()
	}
}

// ends is the number of times a stream ended or could not be opened so far.
func (e *egressClient) ends() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, v := range e.errs {
		n += v
	}
	return n
}

func (e *egressClient) fail(s string) {
	if len(s) > 200 {
		s = s[:200]
	}
	e.mu.Lock()
	e.errs[s]++
	e.mu.Unlock()
}
