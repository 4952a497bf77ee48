package ingress

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

// slowPublisher answers every message after delay, from another goroutine, as a broker's
// receipt comes.
type slowPublisher struct{ delay time.Duration }

func (p *slowPublisher) PublishAsync(_ context.Context, _ *Message, done func(string, error)) {
	time.AfterFunc(p.delay, func() { done("1:1:-1:-1", nil) })
}

func (p *slowPublisher) PublishStream(context.Context, *Message, int64, io.Reader) (string, error) {
	return "1:1:-1:-1", nil
}

// stageObserver keeps the stages PublishStage is given.
type stageObserver struct {
	nopObserver
	mu     sync.Mutex
	stages map[string][]time.Duration
}

func (o *stageObserver) PublishStage(_, stage string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stages == nil {
		o.stages = map[string][]time.Duration{}
	}
	o.stages[stage] = append(o.stages[stage], d)
}

// TestPublishStagesPlaceTheBrokersTimeInSend: a streamed record's sampled time is split
// into its stages, each reported once, and the time the publisher took to answer is in
// the send stage.
func TestPublishStagesPlaceTheBrokersTimeInSend(t *testing.T) {
	const brokerTime = 30 * time.Millisecond
	obs := &stageObserver{}
	s := New(&slowPublisher{delay: brokerTime}, nil, obs, telemetry.Disabled())
	s.Update(table(t, "routes:\n  - name: r\n    default: {topic: t}\n"), nil, limits)
	e := echo.New()
	s.Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/publish/r", bytes.NewReader(recordio.AppendRecord(nil, []byte(`{"n":1}`))))
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, st := range []string{"read", "queue", "send", "order", "write"} {
		if len(obs.stages[st]) != 1 {
			t.Fatalf("stage %s observed %d times, want once: %v", st, len(obs.stages[st]), obs.stages)
		}
		if d := obs.stages[st][0]; d < 0 {
			t.Errorf("stage %s took %s", st, d)
		}
	}
	if d := obs.stages["send"][0]; d < brokerTime {
		t.Errorf("send took %s; the publisher answered after %s", d, brokerTime)
	}
}
