package egress

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
)

// countingObs counts what a stream's filter left out.
type countingObs struct {
	nopObserver
	mu       sync.Mutex
	filtered map[string]int64
}

func (o *countingObs) Filtered(stream string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.filtered == nil {
		o.filtered = map[string]int64{}
	}
	o.filtered[stream] += n
}

// mesosEvent is a mesos.v1.scheduler.Event of that type number, as protobuf.
func mesosEvent(typ uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), typ)
}

const filterDoc = `
streams:
  - name: s
    topics: [t]
    ack: client
    envelope: json
    filter:
      schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
      match:
        - json: {type: [UPDATE]}
        - proto: {type: [UPDATE]}
        - properties: {agent: [a1]}
`

func filterServer(t *testing.T, f Subscriber, obs Observer, doc string) (*Server, string) {
	t.Helper()
	s := New(f, nil, obs, nil)
	s.Update(compileDoc(t, doc), nil, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	return s, serveServer(t, s)
}

func compileDoc(t *testing.T, doc string) *mapping.Table {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func serveServer(t *testing.T, s *Server) string {
	t.Helper()
	e := echo.New()
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	return hs.URL
}

func jsonField(t *testing.T, rec []byte, name string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec, &m); err != nil {
		t.Fatalf("record %s: %v", rec, err)
	}
	v, _ := m[name].(string)
	return v
}

// TestAStreamFilterDeliversWhatMatchesAndAcknowledgesTheRest: JSON and protobuf Mesos
// events in one stream, kept by their type (a json and a proto alternative) or by a
// property; what matches none is acknowledged without being written, takes no record
// position, and is counted.
func TestAStreamFilterDeliversWhatMatchesAndAcknowledgesTheRest(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 20)}
	obs := &countingObs{}
	_, url := filterServer(t, f, obs, filterDoc)
	in := []*Delivery{
		{ID: "1:0:-1:0", Payload: []byte(`{"type":"UPDATE","n":1}`)},
		{ID: "1:0:-1:1", Payload: []byte(`{"type":"HEARTBEAT"}`)},
		{ID: "1:1:-1:-1", Payload: mesosEvent(4)}, // UPDATE
		{ID: "1:2:-1:-1", Payload: mesosEvent(8)}, // HEARTBEAT
		{ID: "1:3:-1:-1", Payload: []byte(`{"type":"OFFERS"}`), Properties: map[string]string{"agent": "a1"}},
		{ID: "1:4:-1:-1", Payload: mesosEvent(2), Properties: map[string]string{"agent": "a2"}},
		{ID: "1:5:-1:-1", Payload: []byte(`not json, not this protobuf`)},
		{ID: "1:6:-1:-1", Payload: []byte(`{"type":"UPDATE","n":2}`)},
	}
	for _, d := range in {
		f.feed <- d
	}
	resp, rd := get(t, url+"/v1/streams/s")
	defer resp.Body.Close()
	var got []string
	for range 4 {
		rec, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, jsonField(t, rec, "messageId"))
	}
	want := []string{"1:0:-1:0", "1:1:-1:-1", "1:3:-1:-1", "1:6:-1:-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	f.mu.Lock()
	acked := slices.Clone(f.acked)
	f.mu.Unlock()
	slices.Sort(acked)
	if wantAcked := []string{"1:0:-1:1", "1:2:-1:-1", "1:4:-1:-1", "1:5:-1:-1"}; !slices.Equal(acked, wantAcked) {
		t.Fatalf("acknowledged %v before the client's acks, want the filtered %v", acked, wantAcked)
	}
	obs.mu.Lock()
	n := obs.filtered["s"]
	obs.mu.Unlock()
	if n != 4 {
		t.Fatalf("counted %d filtered, want 4", n)
	}
	// Positions count what was written: the fourth record written is position 3.
	code, ans := postIDs(t, url+"/v1/streams/s/ack?through=3", resp.Header.Get("Stream-Id"))
	if code != http.StatusOK || ans["acked"] != float64(4) {
		t.Fatalf("ack through=3: %d %v, want the 4 delivered acknowledged", code, ans)
	}
}

// TestHeartbeatsGoOutWhileTheFilterLeavesEverythingOut: messages keep coming, none is
// kept; the client still gets its heartbeats (the stream flushes between messages, but
// writes nothing, so that must not restart the heartbeat's clock).
func TestHeartbeatsGoOutWhileTheFilterLeavesEverythingOut(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 1)}
	_, url := filterServer(t, f, nil, filterDoc+"    heartbeatInterval: 100ms\n    heartbeat: '{\"type\":\"HEARTBEAT\"}'\n")
	resp, rd := get(t, url+"/v1/streams/s")
	defer resp.Body.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case f.feed <- &Delivery{ID: "2:" + strconv.Itoa(i) + ":-1:-1", Payload: []byte(`{"type":"OFFERS"}`)}:
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	got := make(chan error, 1)
	go func() {
		for range 2 {
			rec, err := rd.Next()
			if err != nil {
				got <- err
				return
			}
			if string(rec) != `{"type":"HEARTBEAT"}` {
				got <- errString("a record that is no heartbeat: " + string(rec))
				return
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		resp.Body.Close()
		t.Fatal("no two heartbeats within 3s of a 100ms heartbeatInterval while every message was filtered out")
	}
}

// TestAReloadThatChangesTheFilterAppliesToTheNextMessage: an open stream filters by the
// configuration in force when each message comes, not the one it opened with.
func TestAReloadThatChangesTheFilterAppliesToTheNextMessage(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 4)}
	s, url := filterServer(t, f, nil, filterDoc)
	resp, rd := get(t, url+"/v1/streams/s")
	defer resp.Body.Close()
	f.feed <- &Delivery{ID: "3:0:-1:-1", Payload: []byte(`{"type":"UPDATE"}`)}
	rec, err := rd.Next()
	if err != nil || jsonField(t, rec, "messageId") != "3:0:-1:-1" {
		t.Fatalf("%s %v", rec, err)
	}
	s.Update(compileDoc(t, strings.Replace(filterDoc, "json: {type: [UPDATE]}", "json: {type: [OFFERS]}", 1)), nil,
		Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	f.feed <- &Delivery{ID: "3:1:-1:-1", Payload: []byte(`{"type":"UPDATE"}`)}
	f.feed <- &Delivery{ID: "3:2:-1:-1", Payload: []byte(`{"type":"OFFERS"}`)}
	rec, err = rd.Next()
	if err != nil || jsonField(t, rec, "messageId") != "3:2:-1:-1" {
		t.Fatalf("after the reload: %s %v, want 3:2:-1:-1 (OFFERS kept, UPDATE left out)", rec, err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
