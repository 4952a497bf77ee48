package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/client"
)

var fastBackoff = client.Backoff{Initial: time.Millisecond, Multiplier: 2, Jitter: 0.1, Max: 20 * time.Millisecond}

// outcomes collects OnReceipt's reports.
type outcomes struct {
	mu  sync.Mutex
	got map[uint64][]client.Receipt
}

func (o *outcomes) add(r client.Receipt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.got == nil {
		o.got = map[uint64][]client.Receipt{}
	}
	o.got[r.Sequence] = append(o.got[r.Sequence], r)
}

// each checks that records [0, n) had exactly one outcome each and returns them.
func (o *outcomes) each(t *testing.T, n uint64) map[uint64]client.Receipt {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	one := map[uint64]client.Receipt{}
	for s := uint64(0); s < n; s++ {
		switch rs := o.got[s]; len(rs) {
		case 1:
			one[s] = rs[0]
		default:
			t.Errorf("record %d: %d outcomes %v, want one", s, len(rs), rs)
		}
	}
	if len(o.got) > int(n) {
		t.Errorf("%d records with outcomes, want %d", len(o.got), n)
	}
	return one
}

// publishAll publishes records 0..n-1 (their numbers as text) and closes the Publisher.
func publishAll(t *testing.T, opts client.PublisherOptions, n int) (*outcomes, client.PublisherStats) {
	t.Helper()
	var o outcomes
	opts.OnReceipt = o.add
	if opts.Backoff == (client.Backoff{}) {
		opts.Backoff = fastBackoff
	}
	p, err := client.NewPublisher(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		if _, err := p.Publish(ctx, []byte(strconv.Itoa(i))); err != nil {
			t.Fatalf("Publish(%d): %v", i, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if next := p.NextSequence(); next != opts.FirstSequence+uint64(n) {
		t.Errorf("NextSequence = %d, want %d", next, opts.FirstSequence+uint64(n))
	}
	return &o, p.Stats()
}

// A connection cut after the bridge stored a record but before its receipt: the next
// request starts at that record, with its number, and the broker's duplicate answer is
// its outcome; nothing is lost or stored twice.
func TestPublisherResumesFromTheFirstUnreceiptedRecordAfterACut(t *testing.T) {
	f := newFakeBridge(t)
	f.step = func(n int, seq uint64) step {
		if n == 0 && seq == 7 || n == 1 && seq == 15 {
			return step{cut: true} // stored, receipt lost
		}
		return step{}
	}
	o, st := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1"}, 30)
	f.storedOnce(t, 30, nil)
	got := o.each(t, 30)
	for _, s := range []uint64{7, 15} {
		if got[s].Outcome != client.Duplicate {
			t.Errorf("record %d: %v, want duplicate (stored before the cut)", s, got[s].Outcome)
		}
	}
	if got[8].Outcome != client.Persisted || got[8].MessageID == "" {
		t.Errorf("record 8: %+v, want persisted with a message id", got[8])
	}
	reqs := f.requestLog()
	if len(reqs) != 3 || reqs[1].sequence != 7 || reqs[2].sequence != 15 {
		t.Fatalf("requests began at %v, want 0, 7, 15", sequences(reqs))
	}
	if st.Duplicates != 2 || st.Persisted != 28 || st.Requests != 3 {
		t.Errorf("stats %+v", st)
	}
}

// 503 before the stream with Retry-After: 1 is waited out, not retried at the backoff's
// millisecond.
func TestPublisherWaitsOutRetryAfterOf503(t *testing.T) {
	f := newFakeBridge(t)
	var at [2]time.Time
	f.before = func(n int, r *http.Request) (int, string) {
		if n < 2 {
			at[n] = time.Now()
		}
		if n == 0 {
			return http.StatusServiceUnavailable, "1"
		}
		return 0, ""
	}
	var causes []error
	o, _ := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1",
		OnRetry: func(_ uint64, cause error, _ time.Duration) { causes = append(causes, cause) }}, 5)
	o.each(t, 5)
	f.storedOnce(t, 5, nil)
	if gap := at[1].Sub(at[0]); gap < 950*time.Millisecond {
		t.Errorf("second request %v after the 503 with Retry-After: 1", gap)
	}
	var se *client.StatusError
	if len(causes) != 1 || !errors.As(causes[0], &se) || se.Status != 503 || se.RetryAfter != time.Second {
		t.Errorf("retry causes %v, want one 503 with Retry-After 1s", causes)
	}
}

// 409 (another request still holds the stream) is waited out until the stream is free.
func TestPublisherWaitsOut409UntilTheStreamIsFree(t *testing.T) {
	f := newFakeBridge(t)
	f.before = func(n int, r *http.Request) (int, string) {
		if n < 3 {
			return http.StatusConflict, ""
		}
		return 0, ""
	}
	o, st := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1"}, 10)
	o.each(t, 10)
	f.storedOnce(t, 10, nil)
	if st.Retries != 3 {
		t.Errorf("retries %d, want 3", st.Retries)
	}
}

// A record that failed for now stops the request (summary with resumeSequence); a later
// record of the request, stored on another topic, is reported once, and the resend starts
// at the failed record's number.
func TestPublisherResumesAtTheSummarysResumeSequence(t *testing.T) {
	f := newFakeBridge(t)
	f.step = func(n int, seq uint64) step {
		switch {
		case n == 0 && seq == 5:
			return step{status: 503}
		case n == 0 && seq == 6:
			return step{topic: "other", stop: false}
		case n == 0 && seq == 7:
			return step{status: 503, stop: true}
		case seq == 6:
			return step{topic: "other"}
		}
		return step{}
	}
	o, st := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1", FirstSequence: 0}, 12)
	got := o.each(t, 12)
	f.storedOnce(t, 12, nil)
	if got[6].Outcome != client.Persisted {
		t.Errorf("record 6: %v, want persisted (its first receipt)", got[6].Outcome)
	}
	reqs := f.requestLog()
	if len(reqs) < 2 || reqs[1].sequence != 5 {
		t.Fatalf("requests began at %v, want 0 then 5", sequences(reqs))
	}
	f.mu.Lock()
	sent6 := f.sent[6]
	f.mu.Unlock()
	if sent6 != 2 || st.Duplicates != 0 {
		t.Errorf("record 6 sent %d times, %d duplicates reported; want it resent and its duplicate receipt not reported", sent6, st.Duplicates)
	}
}

// A record refused for good in the middle is reported refused, never resent, and the
// records after it go on.
func TestPublisherSkipsARecordRefusedForGood(t *testing.T) {
	f := newFakeBridge(t)
	f.step = func(n int, seq uint64) step {
		switch {
		case seq == 4:
			return step{status: 413}
		case n == 0 && seq == 9:
			return step{cut: true, status: 503}
		}
		return step{}
	}
	o, st := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1"}, 12)
	got := o.each(t, 12)
	f.storedOnce(t, 12, map[uint64]bool{4: true})
	r := got[4]
	var re *client.RecordError
	if r.Outcome != client.Refused || r.Status != 413 || !errors.Is(r.Err, client.ErrRefused) || !errors.As(r.Err, &re) || re.Sequence != 4 {
		t.Errorf("record 4: %+v, want refused for good (413) with its number", r)
	}
	f.mu.Lock()
	sent := f.sent[4]
	f.mu.Unlock()
	if sent != 1 {
		t.Errorf("record 4 sent %d times, want once", sent)
	}
	if st.Refused != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Without a stream name the same rule holds (at least once): the resend starts at the
// first unreceipted record and what was stored before a lost receipt is stored again.
func TestPublisherWithoutAStreamNameResendsFromTheFirstUnreceipted(t *testing.T) {
	f := newFakeBridge(t)
	f.step = func(n int, seq uint64) step {
		if n == 0 && seq == 3 {
			return step{cut: true}
		}
		return step{}
	}
	o, _ := publishAll(t, client.PublisherOptions{URL: f.url()}, 6)
	o.each(t, 6)
	reqs := f.requestLog()
	if len(reqs) != 2 || reqs[1].header.Get("Stream-Sequence") != "" || reqs[1].header.Get("Stream-Name") != "" {
		t.Fatalf("requests %v", reqs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := len(f.stored["t"]); c != 7 {
		t.Errorf("%d stored, want 7 (record 3 twice: at least once)", c)
	}
}

// Every request carries the contract's headers, the caller's and a fresh bearer token.
func TestPublisherSendsTheContractsHeadersAndAFreshToken(t *testing.T) {
	f := newFakeBridge(t)
	f.before = func(n int, r *http.Request) (int, string) {
		if n == 0 {
			return http.StatusServiceUnavailable, ""
		}
		return 0, ""
	}
	var tokens atomic.Int32
	h := http.Header{}
	h.Set("X-Attempt", "a")
	o, _ := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1", FirstSequence: 100, ContentType: "application/x-protobuf", Header: h,
		Token: client.TokenFunc(func(context.Context) (string, error) { return "tok" + strconv.Itoa(int(tokens.Add(1))), nil })}, 3)
	_ = o
	reqs := f.requestLog()
	for i, want := range []string{"Bearer tok1", "Bearer tok2"} {
		hd := reqs[i].header
		if hd.Get("Authorization") != want || hd.Get("Content-Type") != "application/recordio" || hd.Get("Accept") != "application/recordio" ||
			hd.Get("Message-Content-Type") != "application/x-protobuf" || hd.Get("Stream-Name") != "s-1" || hd.Get("Stream-Sequence") != "100" || hd.Get("X-Attempt") != "a" {
			t.Errorf("request %d headers %v", i, hd)
		}
	}
}

// Publish waits while the unreceipted bytes are at their bound, and gives up with its
// context.
func TestPublishWaitsForRoomAndGivesUpWithItsContext(t *testing.T) {
	release := make(chan struct{})
	srv := newFakeBridge(t)
	srv.step = func(n int, seq uint64) step {
		<-release
		return step{}
	}
	p, err := client.NewPublisher(client.PublisherOptions{URL: srv.url(), StreamName: "s", MaxUnreceiptedBytes: 10, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Publish(ctx, []byte("12345678")); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.Publish(short, []byte("123")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish beyond the bound: %v, want to wait and give up", err)
	}
	close(release)
	if _, err := p.Publish(ctx, []byte("123")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Persisted != 2 {
		t.Errorf("stats %+v", st)
	}
	if _, err := p.Publish(ctx, []byte("x")); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
}

// A refusal that retrying cannot change (401, 404, 415...) stops the Publisher with it;
// NextSequence names where to start again.
func TestPublisherStopsOnARefusalBeforeTheStream(t *testing.T) {
	f := newFakeBridge(t)
	f.before = func(int, *http.Request) (int, string) { return http.StatusUnauthorized, "" }
	p, err := client.NewPublisher(client.PublisherOptions{URL: f.url(), StreamName: "s", FirstSequence: 42, Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = p.Publish(ctx, []byte("x"))
	var se *client.StatusError
	if err := p.Flush(ctx); !errors.As(err, &se) || se.Status != 401 {
		t.Fatalf("Flush: %v, want the 401", err)
	}
	if err := p.Close(ctx); !errors.As(err, &se) {
		t.Errorf("Close: %v", err)
	}
	if p.NextSequence() != 42 {
		t.Errorf("NextSequence %d, want 42", p.NextSequence())
	}
}

func TestNewPublisherRefusesBadOptions(t *testing.T) {
	for _, o := range []client.PublisherOptions{
		{URL: "127.0.0.1:8080/v1/publish/x"},
		{URL: "http://h/p", StreamName: "a b"},
		{URL: "http://h/p", StreamName: "s", FirstSequence: 1 << 63},
	} {
		if _, err := client.NewPublisher(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func sequences(reqs []request) []uint64 {
	var s []uint64
	for _, r := range reqs {
		s = append(s, r.sequence)
	}
	return s
}

// A bridge that stops answering with records waiting (a frozen process, a half-open
// connection) is left after ReceiptTimeout and the records are sent again.
func TestPublisherLeavesARequestThatAnswersNothing(t *testing.T) {
	f := newFakeBridge(t)
	frozen := make(chan struct{})
	t.Cleanup(func() { close(frozen) })
	f.step = func(n int, seq uint64) step {
		if n == 0 && seq == 3 {
			<-frozen // never answers while the test runs
		}
		return step{}
	}
	var causes []error
	o, _ := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1", ReceiptTimeout: 200 * time.Millisecond,
		OnRetry: func(_ uint64, cause error, _ time.Duration) { causes = append(causes, cause) }}, 6)
	o.each(t, 6)
	f.storedOnce(t, 6, nil)
	if len(causes) != 1 || !strings.Contains(causes[0].Error(), "no answer for 200ms") {
		t.Errorf("retry causes %v, want one stall", causes)
	}
}

// Over TLS (HTTP/2, the server's certificate trusted through TLSConfig) the rule holds the
// same: a cut stream resumes at its first unreceipted record.
func TestPublisherOverTLSResumesTheSame(t *testing.T) {
	f := newFakeBridgeTLS(t)
	f.step = func(n int, seq uint64) step {
		if n == 0 && seq == 4 {
			return step{cut: true}
		}
		return step{}
	}
	pool := x509.NewCertPool()
	pool.AddCert(f.srv.Certificate())
	o, _ := publishAll(t, client.PublisherOptions{URL: f.url(), StreamName: "s-1", TLSConfig: &tls.Config{RootCAs: pool}}, 8)
	o.each(t, 8)
	f.storedOnce(t, 8, nil)
	reqs := f.requestLog()
	if len(reqs) != 2 || reqs[1].sequence != 4 {
		t.Fatalf("requests began at %v, want 0 and 4", sequences(reqs))
	}
	if reqs[0].proto != 2 {
		t.Errorf("HTTP/%d, want HTTP/2 over TLS", reqs[0].proto)
	}
}
