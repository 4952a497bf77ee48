package otlpwire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
)

// httpTransport POSTs requests to the traces endpoint, as OTLP/HTTP with protobuf bodies.
type httpTransport struct {
	cfg    Config
	url    string
	client *http.Client
	gz     *gzip.Writer
	gzBuf  bytes.Buffer
	header http.Header
}

func newHTTPTransport(cfg Config) (*httpTransport, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = "https://" + defaultHTTPHost + defaultTracesPath
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: endpoint %q: want an http or https URL", ErrConfig, cfg.Endpoint)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS.Clone()
	}
	h := http.Header{}
	for k, v := range cfg.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", "recordio-bridge otlpwire")
	}
	if cfg.Compression == "gzip" {
		h.Set("Content-Encoding", "gzip")
	} else if cfg.Compression != "" {
		return nil, fmt.Errorf("%w: compression %q: want gzip or none", ErrConfig, cfg.Compression)
	}
	t := &httpTransport{cfg: cfg, url: u.String(), client: &http.Client{Transport: tr}, header: h}
	if cfg.Compression == "gzip" {
		t.gz = gzip.NewWriter(io.Discard)
	}
	return t, nil
}

// fencedBody reads buf until fenced; after fence returns no read touches buf, so the
// exporter may write it again even if the HTTP transport still holds the body.
type fencedBody struct {
	mu     sync.Mutex
	buf    []byte
	off    int
	fenced bool
}

var errFenced = errors.New("otlpwire: request body read after the request ended")

func (f *fencedBody) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenced {
		return 0, errFenced
	}
	if f.off >= len(f.buf) {
		return 0, io.EOF
	}
	n := copy(p, f.buf[f.off:])
	f.off += n
	return n, nil
}

func (f *fencedBody) Close() error { return nil }

func (f *fencedBody) fence() {
	f.mu.Lock()
	f.fenced = true
	f.buf = nil
	f.mu.Unlock()
}

func (t *httpTransport) send(ctx context.Context, body []byte) ([]byte, error) {
	if t.gz != nil {
		t.gzBuf.Reset()
		t.gz.Reset(&t.gzBuf)
		if _, err := t.gz.Write(body); err != nil {
			return nil, err
		}
		if err := t.gz.Close(); err != nil {
			return nil, err
		}
		body = t.gzBuf.Bytes()
		if t.gzBuf.Cap() > keptBufferBytes {
			// As the encoder's buffer: a huge request's compressed copy is not kept.
			// Deferred before the fence, so it runs after it: no read uses it then.
			defer func() { t.gzBuf = bytes.Buffer{} }()
		}
	}
	fb := &fencedBody{buf: body}
	defer fb.fence()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, fb)
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(body))
	req.Header = t.header.Clone()
	req.GetBody = func() (io.ReadCloser, error) {
		// A redirect or a retried connection resends the body from its start.
		fb.mu.Lock()
		defer fb.mu.Unlock()
		if fb.fenced {
			return nil, errFenced
		}
		fb.off = 0
		return fb, nil
	}
	resp, err := t.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && ue.Temporary() && ctx.Err() == nil {
			return nil, &retryable{err: err}
		}
		return nil, err
	}
	defer resp.Body.Close()
	data, rerr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if rerr != nil {
			return nil, fmt.Errorf("otlpwire: reading the response to %s: %w", t.url, rerr)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
			return nil, nil
		}
		return data, nil
	}
	text := strings.TrimSpace(string(data[:min(len(data), maxErrorBodyInText)]))
	if text == "" {
		text = "(empty)"
	}
	err = fmt.Errorf("otlpwire: %s answered %s (body: %s)", t.url, resp.Status, text)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return nil, &retryable{throttle: retryAfter(resp.Header.Get("Retry-After")), err: err}
	}
	return nil, err
}

// retryAfter is a Retry-After header's delay: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		if s > int64(1<<63-1)/int64(time.Second) {
			return time.Duration(1<<63 - 1)
		}
		return time.Duration(s) * time.Second
	}
	if d, err := http.ParseTime(v); err == nil {
		return max(time.Until(d), 0)
	}
	return 0
}

func (t *httpTransport) bufferKept() bool { return false }

func (t *httpTransport) close() error {
	t.client.CloseIdleConnections()
	return nil
}
