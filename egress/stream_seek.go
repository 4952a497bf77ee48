package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/httpreply"
	"github.com/recordio-bridge/bridge/mapping"
)

// Seeker is what a Subscription implements to be moved (POST <stream path>/seek, and a
// position that is a time or an id).
type Seeker interface {
	// SeekTime moves every partition to the first message published at t or later.
	SeekTime(ctx context.Context, t time.Time) error
	// SeekID moves the partition of id (ledger:entry:partition:batchIndex) of topic ("":
	// the subscription's only topic) to that message. An id the topic cannot have wraps
	// ErrBadPosition.
	SeekID(ctx context.Context, topic, id string) error
}

// seekRefused says why a stream's subscription may not be moved, or "" if it may: a
// seek moves the cursor that every consumer of a shared, key_shared or failover
// subscription reads from, so it takes streams[].allowSeekShared.
func seekRefused(def *mapping.Stream) string {
	if def.Type == "exclusive" || def.AllowSeekShared {
		return ""
	}
	return fmt.Sprintf("stream %s reads a %s subscription, which other consumers may share: a seek would move them too; "+
		"it is refused unless the stream sets allowSeekShared: true", def.Name, def.Type)
}

// seekRequest is one POST <path>/seek waiting for the stream's loop to carry it out.
type seekRequest struct {
	time  time.Time
	topic string
	id    string
	done  chan seekResult
}

type seekResult struct {
	stale int // ids the client had not acknowledged, no longer acknowledgeable
	err   error
}

// seekBody is the body of POST <path>/seek.
type seekBody struct {
	Time      *string `json:"time"`
	MessageID *string `json:"messageId"`
	Topic     *string `json:"topic"`
}

// maxSeekBody bounds a /seek body.
const maxSeekBody = 4 << 10

// seekTimeout bounds a seek: the broker's answer, and the loop's reaching it.
const seekTimeout = 30 * time.Second

// readSeek reads and checks a /seek body against the stream's topics.
func readSeek(req *http.Request, def *mapping.Stream) (*seekRequest, error) {
	raw, err := io.ReadAll(io.LimitReader(req.Body, maxSeekBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the body: %v", err)
	}
	if len(raw) > maxSeekBody {
		return nil, fmt.Errorf("the body is larger than %d bytes; send {\"time\":\"<RFC 3339>\"} or {\"messageId\":\"ledger:entry:partition:batchIndex\"}", maxSeekBody)
	}
	var b seekBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("the body %.80q is not {\"time\":\"<RFC 3339>\"} or {\"messageId\":\"ledger:entry:partition:batchIndex\"}: %v", raw, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the body %.80q holds more than one JSON object", raw)
	}
	r := &seekRequest{done: make(chan seekResult, 1)}
	switch {
	case (b.Time == nil) == (b.MessageID == nil):
		return nil, fmt.Errorf("the body %.80q must hold exactly one of time and messageId", raw)
	case b.Time != nil:
		if b.Topic != nil {
			return nil, fmt.Errorf("topic %q goes with messageId; a seek by time moves every topic of the stream", *b.Topic)
		}
		p, err := config.ParsePosition(*b.Time)
		if err != nil || p.Time.IsZero() {
			return nil, fmt.Errorf("time %.80q is not an RFC 3339 time after 1970 (such as 2026-12-06T10:00:00Z)", *b.Time)
		}
		r.time = p.Time
	default:
		id, err := config.ParseMessageID(*b.MessageID)
		if err != nil {
			return nil, fmt.Errorf("messageId %.80q: %v", *b.MessageID, err)
		}
		r.id = id
		if b.Topic != nil {
			topic, err := mapping.NormalizeTopic(*b.Topic)
			if err != nil || !containsString(def.Topics, topic) {
				return nil, fmt.Errorf("topic %.200q is not one of stream %s's topics %v", *b.Topic, def.Name, def.Topics)
			}
			r.topic = topic
		} else if len(def.Topics) > 1 {
			return nil, fmt.Errorf("messageId %s names no topic and stream %s reads %d: add \"topic\", one of %v", id, def.Name, len(def.Topics), def.Topics)
		}
	}
	return r, nil
}

func containsString(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// handleSeek serves POST <stream path>/seek for the open stream sm: the stream's loop
// moves the subscription between two records, so the response goes on from the new
// position without ending.
func (sm *stream) handleSeek(c echo.Context) error {
	if msg := seekRefused(sm.def); msg != "" {
		return httpreply.Error(c, http.StatusConflict, msg, 0)
	}
	if _, ok := sm.sub.(Seeker); !ok {
		return httpreply.Error(c, http.StatusNotImplemented, "this bridge's subscriptions cannot be moved", 0)
	}
	r, err := readSeek(c.Request(), sm.def)
	if err != nil {
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	sm.seekMu.Lock() // one seek of a stream at a time
	defer sm.seekMu.Unlock()
	sm.mu.Lock()
	sm.seekReq = r
	interrupt := sm.recvCancel
	sm.mu.Unlock()
	if interrupt != nil {
		interrupt() // the loop is waiting for a message: it looks at the seek now
	}
	sm.wake() // or for acknowledgements (maxUnacked)
	ctx, cancel := context.WithTimeout(c.Request().Context(), seekTimeout+5*time.Second)
	defer cancel()
	var res seekResult
	select {
	case res = <-r.done:
	case <-sm.loopDone:
		return httpreply.Error(c, http.StatusConflict, fmt.Sprintf("stream %s with Stream-Id %s ended before it could be moved; nothing was moved", sm.def.Name, sm.id), 0)
	case <-ctx.Done():
		sm.mu.Lock()
		withdrawn := sm.seekReq == r
		if withdrawn {
			sm.seekReq = nil
		}
		sm.mu.Unlock()
		if withdrawn {
			return httpreply.Error(c, http.StatusServiceUnavailable, "the stream did not reach the seek in time (a client not reading, or pacing); nothing was moved", 1)
		}
		res = <-r.done // taken by the loop: its answer comes within seekTimeout
	}
	switch err := res.err; {
	case err == nil:
		return c.JSON(http.StatusOK, map[string]any{"status": 200, "stale": res.stale})
	case errors.Is(err, ErrBadPosition):
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return httpreply.Error(c, http.StatusServiceUnavailable, err.Error(), 5)
	default:
		return httpreply.Error(c, http.StatusBadGateway, err.Error(), 0)
	}
}

// takeSeek returns the seek waiting for the loop, if any.
func (st *stream) takeSeek() *seekRequest {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.seekReq
	st.seekReq = nil
	return r
}

// seekPending reports whether a seek waits for the loop.
func (st *stream) seekPending() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.seekReq != nil
}

// seek carries out r between two records: what was written goes out first (and, with
// ack=auto, is acknowledged, before the seek, as the Java client flushes its
// acknowledgements first); what the client has not acknowledged is neither
// acknowledged nor acknowledgeable after the move (/ack answers its ids as unknown);
// then the subscription moves. It returns why the stream ends, if it does.
func (st *stream) seek(ctx context.Context, w *loopWriter, r *seekRequest) string {
	if err := w.send(true); err != nil {
		r.done <- seekResult{err: fmt.Errorf("%w: the stream could not write what preceded the seek: %v", ErrUnavailable, err)}
		return "write: " + err.Error()
	}
	st.mu.Lock()
	held := make([]*unackedEntry, 0, len(st.unacked))
	for _, e := range st.unacked {
		held = append(held, e)
	}
	clear(st.unacked)
	clear(st.byPos)
	retrying := st.retrying
	st.retrying = map[string]string{}
	st.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, seekTimeout)
	defer cancel()
	seeker := st.sub.(Seeker)
	var err error
	if r.id != "" {
		err = seeker.SeekID(sctx, r.topic, r.id)
	} else {
		err = seeker.SeekTime(sctx, r.time)
	}
	if err != nil {
		// Nothing moved (or not everywhere): what the client holds stays acknowledgeable.
		st.putBack(held)
		st.mu.Lock()
		for id, topic := range retrying {
			st.retrying[id] = topic
		}
		st.mu.Unlock()
		r.done <- seekResult{err: err}
		st.srv.log.WarnContext(st.ctx, "egress seek failed", "stream", st.def.Name, "streamId", st.id, "error", err.Error())
		return ""
	}
	for _, e := range held {
		st.release(e.d)
	}
	st.wake()
	r.done <- seekResult{stale: len(held)}
	st.srv.log.InfoContext(st.ctx, "egress stream moved", "stream", st.def.Name, "streamId", st.id,
		"time", r.time, "messageId", r.id, "topic", r.topic, "stale", len(held))
	return ""
}
