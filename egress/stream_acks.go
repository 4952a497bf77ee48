package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/internal/httpreply"
	"github.com/recordio-bridge/bridge/recordio"
)

type unackedEntry struct {
	d   *Delivery
	at  time.Time
	pos int64 // the record's position in the response: 0, 1, 2, ...
}

// putLocked records e as awaiting its acknowledgement. It returns the delivery e
// supersedes, if the same message was delivered before and is not settled yet; the
// caller releases it (release) once the lock is let go.
func (st *stream) putLocked(e *unackedEntry) (superseded *Delivery) {
	if old := st.unacked[e.d.ID]; old != nil {
		delete(st.byPos, old.pos) // delivered again: its new position counts
		if old.d != e.d {
			superseded = old.d
		}
	}
	st.unacked[e.d.ID] = e
	st.byPos[e.pos] = e.d.ID
	return superseded
}

// release settles a delivery superseded by a redelivery of its message (see Releaser).
func (st *stream) release(d *Delivery) {
	if d == nil {
		return
	}
	if r, ok := st.sub.(Releaser); ok {
		r.Release(d)
	}
}

// take removes and returns the entry of id under the lock; an id that is not there is
// added to unknown, and nil returned.
func (st *stream) take(id string, unknown *[]string) *unackedEntry {
	st.mu.Lock()
	e := st.takeLocked(id)
	st.mu.Unlock()
	if e == nil {
		*unknown = append(*unknown, id)
	}
	return e
}

// takeLocked removes and returns the entry of id, or nil.
func (st *stream) takeLocked(id string) *unackedEntry {
	e := st.unacked[id]
	if e != nil {
		delete(st.unacked, id)
		delete(st.byPos, e.pos)
	}
	return e
}

// putBack returns entries whose acknowledgement failed, unless delivered again meanwhile:
// those are released, superseded by their redelivery (a failed cumulative
// acknowledgement settled nothing).
func (st *stream) putBack(es []*unackedEntry) {
	var superseded []*Delivery
	st.mu.Lock()
	for _, e := range es {
		if again := st.unacked[e.d.ID]; again == nil {
			st.putLocked(e)
		} else if again.d != e.d {
			superseded = append(superseded, e.d)
		}
	}
	st.mu.Unlock()
	for _, d := range superseded {
		st.release(d)
	}
}

func (st *stream) unackedCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.unacked)
}

// waitForAckRoom blocks an ack=client stream while MaxUnacked messages await acks.
func (st *stream) waitForAckRoom(ctx context.Context) error {
	if st.opts.ack != "client" {
		return nil
	}
	for {
		st.mu.Lock()
		n := len(st.unacked)
		st.mu.Unlock()
		if n < st.def.MaxUnacked || st.seekPending() {
			return nil
		}
		select {
		case <-st.ackWake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// expireAcks redelivers what an ack=client stream has not acknowledged in time.
func (st *stream) expireAcks(ctx context.Context, done <-chan struct{}) {
	every := min(max(st.def.AckTimeout/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			var expired []*Delivery
			st.mu.Lock()
			for id, e := range st.unacked {
				if now.Sub(e.at) > st.def.AckTimeout {
					expired = append(expired, e.d)
					st.takeLocked(id)
				}
			}
			st.redelive += int64(len(expired))
			st.mu.Unlock()
			for _, d := range expired {
				// A timeout is a failed attempt: the message waits its backoff, or goes
				// to the dead-letter goroutine; the sweep itself never waits on a
				// dead-letter topic.
				st.retry(ctx, d, "ack_timeout", false)
			}
			if len(expired) > 0 {
				st.srv.log.Info("acknowledgement timeout: messages redelivered", "stream", st.def.Name, "streamId", st.id, "messages", len(expired))
				select {
				case st.ackWake <- struct{}{}:
				default:
				}
			}
		}
	}
}

// retry sends d back for redelivery after its backoff, which grows with the number of
// times it was delivered already; a message delivered retry.maxDeliveries times goes to
// the dead-letter topic instead: at once when wait is set (a client's /nack, whose answer
// says what became of it), through the stream's dead-letter goroutine otherwise. It
// reports whether d was dead-lettered (or, without wait, set aside for it).
func (st *stream) retry(ctx context.Context, d *Delivery, cause string, wait bool) bool {
	if m := st.def.Retry.MaxDeliveries; m > 0 && int64(d.Redeliveries)+1 >= int64(m) {
		if !wait {
			st.aside(d)
			return true
		}
		if st.deadLetter(ctx, d) {
			return true
		}
	}
	if st.def.Type == "exclusive" || st.def.Type == "failover" {
		// Only where acks may be cumulative, and where the message comes back to this
		// consumer (which forgets it then), so the set stays bounded.
		st.mu.Lock()
		st.retrying[d.ID] = d.Topic
		st.mu.Unlock()
	}
	st.sub.Nack(d, st.def.Retry.Delay(d.Redeliveries, rand.Float64()))
	if o, ok := st.srv.obs.(RetryObserver); ok {
		o.Nacked(st.def.Name, cause, d.Redeliveries+1)
	}
	return false
}

// HandleAck serves POST <stream path>/ack and <stream path>/nack: the message ids to
// acknowledge, or to have delivered again after their backoff, as RecordIO records or a
// JSON array, for the stream named by the Stream-Id header.
func (s *Server) HandleAck(c echo.Context) error {
	req := c.Request()
	st := s.state.Load()
	if st == nil {
		return httpreply.Error(c, http.StatusServiceUnavailable, "no configuration loaded yet", 1)
	}
	caller, err := admission.Authenticate(st.auth, req.Header)
	if err != nil {
		return deny(c, err)
	}
	def, isAck, ok := st.table.LookupStream(req.URL.Path)
	if !ok || !isAck {
		return httpreply.Error(c, http.StatusNotFound, "no acknowledgement or seek endpoint at "+strconv.Quote(req.URL.Path), 0)
	}
	if err := caller.Authorize(admission.Read, def.Name); err != nil {
		return deny(c, err)
	}
	sid := req.Header.Get("Stream-Id")
	if sid == "" {
		return httpreply.Error(c, http.StatusBadRequest, "send the Stream-Id header of the stream whose messages these are", 0)
	}
	s.mu.Lock()
	sm := s.open[sid]
	s.mu.Unlock()
	if sm == nil {
		return httpreply.Error(c, http.StatusConflict, notOpenHere(def.Name, sid), 0)
	}
	if sm.def.Name != def.Name {
		return httpreply.Error(c, http.StatusNotFound, fmt.Sprintf("no open stream %s with Stream-Id %s", def.Name, sid), 0)
	}
	if strings.HasSuffix(strings.TrimRight(req.URL.Path, "/"), "/seek") {
		return sm.handleSeek(c)
	}
	if sm.opts.ack != "client" {
		return httpreply.Error(c, http.StatusConflict, fmt.Sprintf("stream %s acknowledges by itself (ack=auto)", def.Name), 0)
	}
	// The body is read within ackBodyTimeout; the deadline is lifted right after, or it
	// would cut net/http's background read under a long dead-lettering (see httpreply.DropBody).
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Now().Add(ackBodyTimeout))
	refs, err := readIDs(req)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.Response().Header().Set("Connection", "close")
		return c.JSON(http.StatusRequestTimeout, map[string]any{"status": http.StatusRequestTimeout,
			"error": fmt.Sprintf("the body did not arrive within %s; nothing was acknowledged", ackBodyTimeout)})
	}
	_ = rc.SetReadDeadline(time.Time{})
	if errors.Is(err, errTooManyIDs) {
		return httpreply.Error(c, http.StatusRequestEntityTooLarge, err.Error(), 0)
	}
	if err != nil {
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	httpreply.SettleBody(c, false) // anything after the ids: the answer does not wait for it
	throughN, err := ackQuery(req.URL.RawQuery)
	if err != nil {
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	ids, through, err := sm.resolve(refs, throughN)
	if err != nil {
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	if strings.HasSuffix(strings.TrimRight(req.URL.Path, "/"), "/nack") {
		return sm.nack(c, ids)
	}
	if through {
		return sm.ackThrough(c, ids)
	}
	if ca, ok := sm.confirmer(); ok {
		return sm.ackIDsConfirmed(c, ca, ids)
	}
	var unknown []string
	acked := 0
	for i, id := range ids {
		e := sm.take(id, &unknown)
		if e == nil {
			continue
		}
		if err := sm.sub.Ack(e.d); err != nil {
			// The id stays unacknowledged (its ack timeout still runs), so the client can
			// post it again; it learns which ids were acknowledged and which were not.
			sm.putBack([]*unackedEntry{e})
			c.Response().Header().Set("Retry-After", "1")
			return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": 503, "acked": acked, "failed": id,
				"notAcked": ids[i:], "unknown": unknown,
				"error": fmt.Sprintf("acknowledging %s: %v; post the ids in notAcked again", id, err)})
		}
		s.obs.Acked(def.Name, 1, time.Since(e.at))
		acked++
	}
	sm.wake()
	if len(unknown) > 0 {
		return c.JSON(http.StatusBadRequest, map[string]any{"status": 400, "acked": acked, "unknown": unknown, "error": unknownIDs(len(unknown))})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "acked": acked})
}

// unknownIDs says why n ids or positions of an /ack were not acknowledged.
func unknownIDs(n int) string {
	return fmt.Sprintf("%d ids or positions were not delivered on this stream, were acknowledged already, or timed out and were redelivered; "+
		"a message another stream delivered (on this or another bridge process) is acknowledged once this stream has delivered it again", n)
}

// notOpenHere is the answer to an acknowledgement or lookup for a Stream-Id this process
// has no open stream for (409): it ended, or another bridge process serves it. Nothing is
// acknowledged; the messages it delivered without an acknowledgement go back to the
// subscription when its consumer closes (or at their ackTimeout), so the client reads
// them again from a stream and acknowledges them there.
func notOpenHere(stream, sid string) string {
	return fmt.Sprintf("no stream %s with Stream-Id %s is open on this bridge process: it ended, or another process serves it; "+
		"nothing was acknowledged. Its unacknowledged messages are delivered again to the subscription: read them from a stream "+
		"and acknowledge them with that stream's Stream-Id", stream, sid)
}

func (st *stream) wake() {
	select {
	case st.ackWake <- struct{}{}:
	default:
	}
}

// resolve turns what a client posted into message ids: a ref of decimal digits is a
// record's position in the response (an id always has colons), anything else an id. A
// position not awaiting an acknowledgement stays as it is (and is reported unknown).
// ackQuery reads an /ack or /nack query as strictly as a GET's: through (at most once) is
// its only parameter; a malformed query, a repeated or an unknown parameter is an error
// naming it, so a typo never acknowledges something other than what the client meant.
func ackQuery(raw string) (through string, err error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", fmt.Errorf("the query %.64q is malformed: %v", raw, err)
	}
	for k, v := range q {
		if k != "through" {
			return "", fmt.Errorf("unknown query parameter %.64q (known: through)", k)
		}
		if len(v) > 1 {
			return "", fmt.Errorf("query parameter %q given %d times", k, len(v))
		}
	}
	return q.Get("through"), nil
}

// through=N (no body) names every record awaiting its acknowledgement up to position N.
func (st *stream) resolve(refs []string, through string) (ids []string, cumulative bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if through != "" {
		n, err := strconv.ParseInt(through, 10, 64)
		if err != nil || n < 0 {
			return nil, false, fmt.Errorf("through=%q is not a record position (0, 1, 2, ...)", through)
		}
		if len(refs) > 0 {
			return nil, false, errors.New("send either through=N or a body of ids and positions, not both")
		}
		es := make([]*unackedEntry, 0, len(st.unacked))
		for _, e := range st.unacked {
			if e.pos <= n {
				es = append(es, e)
			}
		}
		sort.Slice(es, func(i, j int) bool { return es[i].pos < es[j].pos })
		for _, e := range es {
			ids = append(ids, e.d.ID)
		}
		return ids, true, nil
	}
	ids = make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r
		if pos, err := strconv.ParseInt(r, 10, 64); err == nil && pos >= 0 {
			if id, ok := st.byPos[pos]; ok {
				ids[i] = id
			}
		}
	}
	return ids, false, nil
}

// nack sends the messages back for redelivery, each after its backoff.
func (sm *stream) nack(c echo.Context, ids []string) error {
	var unknown []string
	nacked, dead := 0, 0
	for _, id := range ids {
		e := sm.take(id, &unknown)
		if e == nil {
			continue
		}
		if sm.retry(c.Request().Context(), e.d, "nack", true) {
			dead++
		}
		nacked++
	}
	select {
	case sm.ackWake <- struct{}{}:
	default:
	}
	if len(unknown) > 0 {
		return c.JSON(http.StatusBadRequest, map[string]any{"status": 400, "nacked": nacked, "deadLettered": dead, "unknown": unknown,
			"error": fmt.Sprintf("%d ids were not delivered on this stream, were acknowledged already, or timed out and were redelivered", len(unknown))})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "nacked": nacked, "deadLettered": dead})
}

// maxAckIDs bounds the ids and positions one /ack or /nack request may name: each costs
// memory while the request is served (and again in the answer's "unknown" list), so a
// body of millions of tiny records cannot take the process's memory.
const maxAckIDs = 10000

// maxAckBody bounds an /ack or /nack body: room for maxAckIDs of the longest ids
// (ledger:entry:partition:batch, 61 characters) with their framing, so one JSON string
// cannot make the decoder hold megabytes.
const maxAckBody = 1 << 20

// ackBodyTimeout bounds the read of an /ack or /nack body (at most maxAckBody): a client
// that stops sending it is answered 408 and its connection closed.
var ackBodyTimeout = 30 * time.Second

// errTooManyIDs: a request named more than maxAckIDs ids, or its body is over maxAckBody (413).
var errTooManyIDs = fmt.Errorf("more than %d ids or positions, or more than %d bytes, in one request: post them in several", maxAckIDs, maxAckBody)

// capped reads at most n bytes and then fails with errTooManyIDs (instead of an early
// io.EOF, which would make a long body look like a malformed one).
type capped struct {
	r io.Reader
	n int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.n <= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(c.r, one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, errTooManyIDs
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// readIDs reads message ids from a RecordIO body (one id per record) or a JSON array,
// at most maxAckIDs of them (errTooManyIDs beyond).
func readIDs(req *http.Request) ([]string, error) {
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	body := &capped{r: req.Body, n: maxAckBody}
	switch mt {
	case "":
		if req.ContentLength == 0 {
			return nil, nil // through=N needs no body
		}
	case recordio.MediaRecordIO:
		var ids []string
		rd := recordio.NewReader(body, recordio.MaxRecordSize(256))
		for {
			b, err := rd.Next()
			if errors.Is(err, io.EOF) {
				return ids, nil
			}
			if errors.Is(err, errTooManyIDs) {
				return nil, errTooManyIDs
			}
			if err != nil {
				return nil, err
			}
			if len(ids) == maxAckIDs {
				return nil, errTooManyIDs
			}
			ids = append(ids, string(b))
		}
	case recordio.MediaJSON:
		const notArray = "the body is not a JSON array of message ids and record positions"
		dec := json.NewDecoder(body)
		if tok, err := dec.Token(); errors.Is(err, errTooManyIDs) {
			return nil, errTooManyIDs
		} else if err != nil || tok != json.Delim('[') {
			return nil, notArrayErr(notArray, err, tok)
		}
		var ids []string
		for i := 0; dec.More(); i++ {
			if i == maxAckIDs {
				return nil, errTooManyIDs
			}
			var r json.RawMessage
			if err := dec.Decode(&r); errors.Is(err, errTooManyIDs) {
				return nil, errTooManyIDs
			} else if err != nil {
				return nil, notArrayErr(notArray, err, nil)
			}
			var id string
			var pos uint64
			if err := json.Unmarshal(r, &id); err != nil {
				if err := json.Unmarshal(r, &pos); err != nil {
					return nil, fmt.Errorf("element %d, %.64s, is neither a message id (a string) nor a record position (0, 1, 2, ...)", i, r)
				}
				id = strconv.FormatUint(pos, 10)
			}
			ids = append(ids, id)
		}
		if tok, err := dec.Token(); errors.Is(err, errTooManyIDs) {
			return nil, errTooManyIDs
		} else if err != nil || tok != json.Delim(']') {
			return nil, notArrayErr(notArray, err, tok)
		}
		return ids, nil
	}
	return nil, fmt.Errorf("Content-Type %q: send application/recordio (one id per record) or application/json (an array)", req.Header.Get("Content-Type"))
}

// notArrayErr says why the body is not a JSON array of ids: the decoder's error
// (wrapped, so a read deadline shows through) or what stood where a bracket should have.
func notArrayErr(msg string, err error, tok json.Token) error {
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return fmt.Errorf("%s: found %v", msg, tok)
}
