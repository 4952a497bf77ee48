package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// ackingEgress reads one egress stream with client acknowledgements (ack=client, the JSON
// envelope) through the load balancer: it acknowledges what it read every 100 ms on the
// replica that serves its stream (HAProxy's affinity cookie, sent with each /ack), ends
// its stream every rotate (after acknowledging what it read) and opens it again, wherever
// the balancer sends it, and reconnects after every end.
type ackingEgress struct {
	url    string
	rotate time.Duration
	pkg    bool // read by a client.Subscriber (runPackage) instead

	mu    sync.Mutex
	seen  map[string]int  // record id -> deliveries
	acked map[string]bool // record ids a 200 (or the acked part of a 400) acknowledged
	// unanswered holds record ids whose acknowledgement got no answer (the connection
	// ended, typically as its replica was killed): the replica may or may not have passed
	// it to the broker. Such a record is judged by the subscription's backlog, not by
	// the client's tally.
	unanswered map[string]bool
	errs       map[string]int // how streams ended, counted
	ackFails   map[string]int // acknowledgements that did not succeed, by status, counted
	streams    int
}

func newAckingEgress(url string, rotate time.Duration) *ackingEgress {
	return &ackingEgress{url: url, rotate: rotate, seen: map[string]int{}, acked: map[string]bool{},
		unanswered: map[string]bool{}, errs: map[string]int{}, ackFails: map[string]int{}}
}

func (e *ackingEgress) run(ctx context.Context) {
	if e.pkg {
		e.runPackage(ctx)
		return
	}
	for ctx.Err() == nil {
		e.once(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type delivery struct{ mid, id string }

func (e *ackingEgress) once(ctx context.Context) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, e.url, nil)
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", "application/json")
	resp, err := ingressHTTP.Do(req)
	if err != nil {
		e.fail(e.errs, err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		e.fail(e.errs, fmt.Sprintf("%d %s", resp.StatusCode, b))
		return
	}
	e.mu.Lock()
	e.streams++
	e.mu.Unlock()
	sid := resp.Header.Get("Stream-Id")
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == haproxyCookie {
			cookie = ck
		}
	}
	got := make(chan delivery, 1024)
	go func() {
		defer close(got)
		rd := recordio.NewReader(resp.Body)
		for {
			rec, err := rd.Next()
			if err != nil {
				if sctx.Err() == nil {
					e.fail(e.errs, "end: "+err.Error())
				}
				return
			}
			var env struct {
				MessageID string `json:"messageId"`
				Payload   record `json:"payload"`
			}
			if json.Unmarshal(rec, &env) == nil && env.MessageID == "" {
				continue // a heartbeat
			}
			if json.Unmarshal(rec, &env) != nil || env.Payload.ID == "" {
				e.fail(e.errs, fmt.Sprintf("record %.100q", rec))
				continue
			}
			select {
			case got <- delivery{env.MessageID, env.Payload.ID}:
			case <-sctx.Done():
				return
			}
		}
	}()
	var pending []delivery
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	rotate := time.After(e.rotate)
	for {
		select {
		case <-ctx.Done():
			return
		case <-rotate:
			e.ack(ctx, sid, cookie, pending)
			return
		case <-tick.C:
			pending = e.ack(ctx, sid, cookie, pending)
		case d, ok := <-got:
			if !ok {
				// The stream ended (its replica went away, or it was drained): what it did
				// not acknowledge is delivered again, here or on another replica.
				return
			}
			e.mu.Lock()
			e.seen[d.id]++
			e.mu.Unlock()
			pending = append(pending, d)
		}
	}
}

// ack acknowledges ds on the stream sid and returns those to try again (a 503's notAcked).
func (e *ackingEgress) ack(ctx context.Context, sid string, cookie *http.Cookie, ds []delivery) []delivery {
	if len(ds) == 0 {
		return nil
	}
	// A message delivered again on the same stream (its ack timed out) has the same id:
	// acknowledged once, the second copy in the same body would be reported unknown.
	var ids []string
	byMID := map[string]string{}
	for _, d := range ds {
		if _, dup := byMID[d.mid]; !dup {
			ids = append(ids, d.mid)
			byMID[d.mid] = d.id
		}
	}
	body, _ := json.Marshal(ids)
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(actx, http.MethodPost, e.url+"/ack", bytes.NewReader(body))
	req.Header.Set("Stream-Id", sid)
	req.Header.Set("Content-Type", "application/json")
	if cookie != nil {
		req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	}
	resp, err := ingressHTTP.Do(req)
	if err != nil {
		e.fail(e.ackFails, "ack: "+err.Error())
		e.mu.Lock()
		for _, mid := range ids {
			e.unanswered[byMID[mid]] = true
		}
		e.mu.Unlock()
		// The stream is likely gone with its replica: these are delivered again, unless
		// the replica passed the acknowledgement on before it went.
		return nil
	}
	defer resp.Body.Close()
	var ans struct {
		Acked    int      `json:"acked"`
		Unknown  []string `json:"unknown"`
		NotAcked []string `json:"notAcked"`
		Error    string   `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	_ = json.Unmarshal(b, &ans)
	notDone := map[string]bool{}
	for _, id := range ans.Unknown {
		notDone[id] = true
	}
	for _, id := range ans.NotAcked {
		notDone[id] = true
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusBadRequest, http.StatusServiceUnavailable:
		if resp.StatusCode != http.StatusOK {
			e.fail(e.ackFails, fmt.Sprintf("ack %d: %.120s", resp.StatusCode, ans.Error))
		}
		e.mu.Lock()
		for _, mid := range ids {
			if !notDone[mid] {
				e.acked[byMID[mid]] = true
			}
		}
		e.mu.Unlock()
	default:
		// 404: the stream is not on the replica the ack reached (it ended, or its replica
		// restarted): nothing was acknowledged, the broker delivers these again.
		e.fail(e.ackFails, fmt.Sprintf("ack %d: %.120s", resp.StatusCode, b))
		return nil
	}
	var again []delivery
	for _, mid := range ans.NotAcked {
		again = append(again, delivery{mid, byMID[mid]})
	}
	return again
}

func (e *ackingEgress) fail(m map[string]int, s string) {
	if len(s) > 200 {
		s = s[:200]
	}
	e.mu.Lock()
	m[s]++
	e.mu.Unlock()
}
