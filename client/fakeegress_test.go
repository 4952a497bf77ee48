package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// fakeEgress is a scripted egress stream with ack=client: each response delivers every
// message not yet acknowledged, by id (envelope) and position, and acknowledgements are
// taken only with the open response's Stream-Id (409 otherwise, as the bridge after a
// reconnect).
type fakeEgress struct {
	envelope bool
	// cutAfter: response n is cut after that many records (0 or less: kept open), once
	// cutOnceAcked messages are acknowledged.
	cutAfter     func(n int) int
	cutOnceAcked int
	// endClean: response n ends cleanly after its records (a drained bridge).
	endClean func(n int) bool
	// endOfTopic: response n ends cleanly after its records with Stream-End: end-of-topic.
	endOfTopic func(n int) bool
	// trailer: response n ends cleanly after its records with this Stream-Error ("": kept
	// open, or cut).
	trailer func(n int) string
	// ack answers a post of items (ids, or positions as decimals) before it is applied:
	// status 0 applies it.
	ack func(post int, items []string) (status int, body string)

	mu        sync.Mutex
	ids       []string
	acked     map[string]int
	nacked    map[string]int
	open      string           // the open response's Stream-Id
	positions map[int64]string // of the open response
	responses int
	posts     [][]string
	gets      []*http.Request // every GET, as received
	stale     int             // acks sent with a Stream-Id that is not open
	lost      int             // acks without the affinity cookie of their stream
	srv       *httptest.Server
}

func newFakeEgress(t *testing.T, n int) *fakeEgress {
	f := &fakeEgress{acked: map[string]int{}, nacked: map[string]int{}}
	for i := range n {
		f.ids = append(f.ids, fmt.Sprintf("7:%d:-1:-1", i))
	}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEgress) url() string { return f.srv.URL + "/v1/streams/s" }

func (f *fakeEgress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/streams/s":
		f.serveStream(w, r)
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/streams/s/ack" || r.URL.Path == "/v1/streams/s/nack"):
		f.serveAck(w, r, strings.HasSuffix(r.URL.Path, "/nack"))
	default:
		http.Error(w, `{"status":404,"error":"no stream"}`, http.StatusNotFound)
	}
}

func (f *fakeEgress) serveStream(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.gets = append(f.gets, r.Clone(context.Background()))
	n := f.responses
	f.responses++
	id := "stream-" + strconv.Itoa(n)
	f.open, f.positions = id, map[int64]string{}
	var todo []string
	for _, m := range f.ids {
		if f.acked[m] == 0 {
			todo = append(todo, m)
		}
	}
	f.mu.Unlock()
	cut, trailer := 0, ""
	if f.cutAfter != nil {
		cut = f.cutAfter(n)
	}
	if f.trailer != nil {
		trailer = f.trailer(n)
	}
	w.Header().Set("Trailer", "Stream-End, Stream-Error") // as the bridge declares them
	w.Header().Set("Content-Type", "application/recordio")
	w.Header().Set("Stream-Id", id)
	http.SetCookie(w, &http.Cookie{Name: "REPLICA", Value: "r-" + id}) // a load balancer's affinity
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	defer func() {
		f.mu.Lock()
		if f.open == id {
			f.open = ""
		}
		f.mu.Unlock()
	}()
	for pos, m := range todo {
		if cut > 0 && pos == cut {
			for f.ackedCount() < f.cutOnceAcked && r.Context().Err() == nil {
				time.Sleep(time.Millisecond)
			}
			panic(http.ErrAbortHandler)
		}
		f.mu.Lock()
		f.positions[int64(pos)] = m
		f.mu.Unlock()
		rec := []byte(`{"n":` + strings.Split(m, ":")[1] + `}`)
		if f.envelope {
			rec = []byte(fmt.Sprintf(`{"messageId":%q,"redeliveryCount":%d,"payload":%s}`, m, n, rec))
		}
		if _, err := w.Write(recordio.AppendRecord(nil, rec)); err != nil {
			return
		}
		_ = rc.Flush()
	}
	if trailer != "" {
		w.Header().Set("Stream-Error", trailer)
		return
	}
	if f.endOfTopic != nil && f.endOfTopic(n) {
		w.Header().Set("Stream-End", "end-of-topic")
		return
	}
	if f.endClean != nil && f.endClean(n) {
		return
	}
	<-r.Context().Done()
}

func (f *fakeEgress) serveAck(w http.ResponseWriter, r *http.Request, nack bool) {
	var raw []json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		http.Error(w, `{"status":400,"error":"bad body"}`, http.StatusBadRequest)
		return
	}
	items := make([]string, len(raw))
	for i, v := range raw {
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		items[i] = s
	}
	f.mu.Lock()
	post := len(f.posts)
	f.posts = append(f.posts, items)
	if ck, err := r.Cookie("REPLICA"); err != nil || ck.Value != "r-"+r.Header.Get("Stream-Id") {
		f.lost++ // a load balancer would have sent it to any replica
	}
	if sid := r.Header.Get("Stream-Id"); sid == "" || sid != f.open {
		f.stale++
		f.mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"status":409,"error":"no stream %s is open on this bridge process; nothing was acknowledged"}`, sid)
		return
	}
	f.mu.Unlock()
	if f.ack != nil {
		if status, body := f.ack(post, items); status != 0 {
			w.WriteHeader(status)
			fmt.Fprint(w, body)
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var unknown []string
	n := 0
	for _, it := range items {
		id := it
		if !strings.Contains(it, ":") {
			p, _ := strconv.ParseInt(it, 10, 64)
			id = f.positions[p]
		}
		switch {
		case id == "" || f.acked[id] > 0:
			unknown = append(unknown, it)
		case nack:
			f.nacked[id]++
			n++
		default:
			f.acked[id]++
			n++
		}
	}
	if len(unknown) > 0 {
		b, _ := json.Marshal(unknown)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"status":400,"error":"not held","unknown":%s}`, b)
		return
	}
	fmt.Fprintf(w, `{"status":200,"acked":%d}`, n)
}

func (f *fakeEgress) ackedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.acked)
}

// ackedOnce checks every message was acknowledged exactly once.
func (f *fakeEgress) ackedOnce(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.ids {
		if f.acked[m] != 1 {
			t.Errorf("message %s acknowledged %d times", m, f.acked[m])
		}
	}
}
