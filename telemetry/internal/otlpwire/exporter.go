package otlpwire

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/internal/backoff"
)

// ErrShutdown is ExportSpans' error after Shutdown.
var ErrShutdown = errors.New("otlpwire: exporter shut down")

// ErrRequestTooLarge is ExportSpans' error for a batch whose request would pass
// Config.MaxRequestBytes: it is not sent.
var ErrRequestTooLarge = errors.New("otlpwire: request too large")

// PartialSuccess is the collector's answer that it accepted the request but rejected
// some of its spans. It is reported to otel.Handle, not returned by ExportSpans.
type PartialSuccess struct {
	RejectedSpans int64
	ErrorMessage  string
}

func (p PartialSuccess) Error() string {
	msg := p.ErrorMessage
	if msg == "" {
		msg = "empty message"
	}
	return fmt.Sprintf("OTLP partial success: %s (%d spans rejected)", msg, p.RejectedSpans)
}

// transport sends one encoded request once. A temporary failure it returns is a
// *retryable (after at least its throttle), any other error is final.
type transport interface {
	send(ctx context.Context, body []byte) (response []byte, err error)
	// bufferKept says the last send failed in a way that may leave body in use by the
	// transport: the exporter must not write it again.
	bufferKept() bool
	close() error
}

type retryable struct {
	throttle time.Duration
	err      error
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// Exporter is an sdktrace.SpanExporter that sends spans over OTLP encoded with protowire.
type Exporter struct {
	cfg Config
	tr  transport

	// sem is held by the export under way (and by Shutdown once it has begun).
	sem      chan struct{}
	enc      Encoder
	stop     context.Context
	stopNow  context.CancelFunc
	shutdown atomic.Bool
	once     sync.Once
	rejected atomic.Int64
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// New builds an Exporter for cfg. It connects lazily: a collector that is not up yet
// fails exports, not New.
func New(cfg Config) (*Exporter, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = defaultMaxRequest
	}
	var tr transport
	var err error
	switch cfg.Protocol {
	case ProtocolHTTP:
		tr, err = newHTTPTransport(cfg)
	case ProtocolGRPC, "":
		cfg.Protocol = ProtocolGRPC
		tr, err = newGRPCTransport(cfg)
	default:
		err = fmt.Errorf("%w: protocol %q: want grpc or http/protobuf", ErrConfig, cfg.Protocol)
	}
	if err != nil {
		return nil, err
	}
	stop, stopNow := context.WithCancel(context.Background())
	return &Exporter{cfg: cfg, tr: tr, sem: make(chan struct{}, 1), stop: stop, stopNow: stopNow}, nil
}

// NewFromEnv is New(FromEnv()).
func NewFromEnv() (*Exporter, error) {
	cfg, err := FromEnv()
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// Rejected is how many spans collectors said they rejected in partial successes.
func (e *Exporter) Rejected() int64 { return e.rejected.Load() }

// ExportSpans encodes spans and sends them, retrying temporary failures with backoff
// until the export's timeout, ctx or Shutdown ends it.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stop.Done():
		return ErrShutdown
	}
	defer func() { <-e.sem }()
	if e.shutdown.Load() {
		return ErrShutdown
	}
	ctx, cancel := context.WithTimeoutCause(ctx, e.cfg.Timeout, errors.New("otlpwire: export timeout"))
	defer cancel()
	unhook := context.AfterFunc(e.stop, cancel)
	defer unhook()

	body := e.enc.Encode(spans)
	if cap(e.enc.buf) > keptBufferBytes {
		// A large request's memory is held for its export only: a huge batch, or one
		// refused as too large, does not leave its buffer with an idle exporter.
		defer func() { e.enc.buf = nil }()
	}
	if len(body) == 0 { // only nil spans
		return nil
	}
	if len(body) > e.cfg.MaxRequestBytes {
		return fmt.Errorf("%w: %d spans encode to %d bytes, more than %d", ErrRequestTooLarge, len(spans), len(body), e.cfg.MaxRequestBytes)
	}
	resp, err := e.sendWithRetry(ctx, body)
	if e.tr.bufferKept() {
		e.enc.buf = nil
	}
	if err != nil {
		return err
	}
	if ps, ok := parsePartialSuccess(resp); ok {
		e.rejected.Add(ps.RejectedSpans)
		otel.Handle(ps)
	}
	return nil
}

// sendWithRetry sends body until it is accepted, a failure is final, or ctx or the retry
// budget ends; every wait between tries ends with ctx.
func (e *Exporter) sendWithRetry(ctx context.Context, body []byte) ([]byte, error) {
	r := e.cfg.Retry
	started := time.Now()
	// The backoff: the interval growing by 1.5 up to MaxInterval, each wait the interval
	// ±50 % (not capped: the official exporters' schedule); the collector's throttle if
	// it is longer.
	schedule := backoff.Schedule{Initial: r.InitialInterval, Multiplier: 1.5, Max: r.MaxInterval}
	for attempt := 0; ; attempt++ {
		resp, err := e.tr.send(ctx, body)
		if err == nil {
			return resp, nil
		}
		var re *retryable
		if !r.Enabled || !errors.As(err, &re) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		delay := backoff.Spread(schedule.Delay(attempt, 0), 0, 0.5, rand.Float64()) // #nosec G404 -- jitter
		elapsed := time.Since(started)
		// Compared without adding: a throttle near the largest Duration (a huge
		// Retry-After or RetryInfo) would overflow elapsed+throttle into a negative.
		if r.MaxElapsedTime > 0 && re.throttle > r.MaxElapsedTime-elapsed {
			return nil, fmt.Errorf("otlpwire: retries would pass %v: %w", r.MaxElapsedTime, err)
		}
		delay = max(delay, re.throttle)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// Shutdown stops the exporter: later exports fail with ErrShutdown. It waits for the
// export under way until ctx ends, then cuts it, and closes the connection.
func (e *Exporter) Shutdown(ctx context.Context) error {
	var err error
	e.once.Do(func() {
		e.shutdown.Store(true)
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
			e.stopNow()
			// The export under way ends promptly now: each of its waits ends with its ctx.
			e.sem <- struct{}{}
		}
		e.stopNow()
		if cerr := e.tr.close(); err == nil {
			err = cerr
		}
	})
	return err
}

// parsePartialSuccess reads ExportTraceServiceResponse.partial_success; ok when it says
// something (spans rejected or a message).
func parsePartialSuccess(b []byte) (PartialSuccess, bool) {
	var ps PartialSuccess
	found := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ps, false
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			m, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ps, false
			}
			b = b[n:]
			for len(m) > 0 {
				num, typ, n := protowire.ConsumeTag(m)
				if n < 0 {
					return ps, false
				}
				m = m[n:]
				switch {
				case num == 1 && typ == protowire.VarintType:
					v, n := protowire.ConsumeVarint(m)
					if n < 0 {
						return ps, false
					}
					ps.RejectedSpans, m = int64(v), m[n:] // #nosec G115 -- an int64 field
				case num == 2 && typ == protowire.BytesType:
					s, n := protowire.ConsumeString(m)
					if n < 0 {
						return ps, false
					}
					ps.ErrorMessage, m = s, m[n:]
				default:
					n := protowire.ConsumeFieldValue(num, typ, m)
					if n < 0 {
						return ps, false
					}
					m = m[n:]
				}
			}
			found = true
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ps, false
		}
		b = b[n:]
	}
	return ps, found && (ps.RejectedSpans != 0 || ps.ErrorMessage != "")
}
