package egress

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
)

// endlessSub always has a message at hand, as a consumer of a busy topic does.
type endlessSub struct {
	fakeSub
	n atomic.Int64
}

func (e *endlessSub) Subscribe(context.Context, SubscribeOptions) (Subscription, error) {
	return e, nil
}

func (e *endlessSub) next() *Delivery {
	n := e.n.Add(1)
	return &Delivery{ID: fmt.Sprintf("1:%d:-1:-1", n), Payload: []byte(`{"n":1}`)}
}

func (e *endlessSub) Receive(ctx context.Context) (*Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return e.next(), nil
}

func (e *endlessSub) TryReceive() (*Delivery, bool) { return e.next(), true }

// A stream whose consumer always has a message at hand must still end when the server
// drains, instead of running until its connection is closed under it.
func TestABusyStreamHonoursDrain(t *testing.T) {
	f := &endlessSub{}
	s := New(f, nil, nil, nil)
	cfg, err := config.Parse([]byte("streams:\n  - name: s\n    topics: [t]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Update(tab, nil, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/*", s.Handle)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	t.Cleanup(hs.CloseClientConnections)
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/streams/s", nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := recordio.NewReader(resp.Body).Next(); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() { // a client that keeps up
		_, err := io.Copy(io.Discard, resp.Body)
		read <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v (a busy stream ignored it)", err)
	}
	if err := <-read; err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		t.Fatal("the drained stream did not close its consumer")
	}
}
