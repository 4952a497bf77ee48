package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/bridgebin"
	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/logbuf"
	"github.com/recordio-bridge/bridge/recordio"
)

// bridgeBin is the binary under test (bridgebin.Path).
func bridgeBin(t testing.TB) string {
	t.Helper()
	return bridgebin.Path(t, "..")
}

// bridgeProc is a running bridge binary. Its configuration lives the way Kubernetes
// mounts a ConfigMap: dir/config.yaml -> ..data/config.yaml, ..data -> a timestamped
// directory, so rewrite can swap it atomically.
type bridgeProc struct {
	t       testing.TB
	cmd     *exec.Cmd
	dir     string
	Config  string // path given to -config
	DataURL string // http://127.0.0.1:port
	OpsURL  string
	logs    *logbuf.Buffer
	exited  chan struct{}
	exitErr error
	gen     int
}

// startBridge runs the binary with cfg (YAML without the listen section, which is
// added with free ports) and waits until /readyz answers 200.
func startBridge(t testing.TB, cfg string) *bridgeProc {
	t.Helper()
	return startBridgeEnv(t, cfg, nil)
}

// startBridgeEnv is startBridge with extra environment variables (KEY=VALUE).
func startBridgeEnv(t testing.TB, cfg string, env []string) *bridgeProc {
	t.Helper()
	p := launchBridge(t, cfg, env)
	p.waitReady()
	return p
}

// launchBridge runs the binary as startBridgeEnv does, without waiting for /readyz (a
// bridge whose broker cannot be reached never becomes ready).
func launchBridge(t testing.TB, cfg string, env []string) *bridgeProc {
	t.Helper()
	bin := bridgeBin(t)
	ports, err := broker.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	p := &bridgeProc{t: t, dir: t.TempDir(), logs: &logbuf.Buffer{}, exited: make(chan struct{}),
		DataURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), OpsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	p.Config = filepath.Join(p.dir, "config.yaml")
	p.write(cfg)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), p.Config); err != nil {
		t.Fatal(err)
	}
	level := os.Getenv("BRIDGE_LOG_LEVEL")
	if level == "" {
		level = "info"
	}
	p.cmd = exec.Command(bin, "run", "-config", p.Config, "-log-level", level)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = diesWithParent()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(60 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		// A binary built with -race (make e2e-race) reports races on stderr and goes on.
		if logs := p.logs.String(); strings.Contains(logs, "WARNING: DATA RACE") {
			i := strings.Index(logs, "WARNING: DATA RACE")
			t.Errorf("the bridge reported a data race:\n%s", logs[i:min(len(logs), i+8000)])
		}
		if t.Failed() {
			t.Logf("bridge logs:\n%s", tail(p.logs.String(), 60))
		}
	})
	return p
}

// waitReady waits until /readyz answers 200, failing the test if the bridge exits or is
// not ready within 30 s.
func (p *bridgeProc) waitReady() {
	t := p.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.OpsURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("bridge exited at start-up (%v):\n%s", p.exitErr, p.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge not ready after 30s:\n%s", p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// write installs cfg as a new ConfigMap generation: a fresh directory, then an atomic
// rename of the ..data symlink onto it, as the kubelet does.
func (p *bridgeProc) write(cfg string) {
	p.t.Helper()
	host := strings.TrimPrefix(p.DataURL, "http://")
	ops := strings.TrimPrefix(p.OpsURL, "http://")
	full := fmt.Sprintf("listen:\n  data: %s\n  ops: %s\n%s", host, ops, cfg)
	p.gen++
	swapGeneration(p.t, p.dir, p.gen, map[string]string{"config.yaml": full})
}

// swapGeneration writes files into generation gen of a kubelet-style volume directory
// (dir/..gen_NNN/name) and renames the ..data symlink onto it atomically. The caller makes
// the dir/name -> ..data/name links once.
func swapGeneration(t testing.TB, dir string, gen int, files map[string]string) {
	t.Helper()
	name := fmt.Sprintf("..gen_%03d", gen)
	if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	for f, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(name, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// terminate sends SIGTERM and waits for the exit, returning the exit error and how long it took.
func (p *bridgeProc) terminate(wait time.Duration) (error, time.Duration) {
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.exitErr, time.Since(start)
	case <-time.After(wait):
		return fmt.Errorf("still running %s after SIGTERM", wait), time.Since(start)
	}
}

func (p *bridgeProc) readyz(t testing.TB) map[string]any {
	t.Helper()
	resp, err := http.Get(p.OpsURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// receipt is one record of a streamed ingress response (a receipt, a failure or the summary).
type receipt struct {
	Seq        int64  `json:"seq"`
	Status     int    `json:"status"`
	Topic      string `json:"topic"`
	MessageID  string `json:"messageId"`
	Error      string `json:"error"`
	Summary    bool   `json:"summary"`
	Records    int64  `json:"records"`
	Published  int64  `json:"published"`
	Failed     int64  `json:"failed"`
	Offset     *int64 `json:"offset"`
	RetryAfter int    `json:"retryAfter"`
	// Named streams (Stream-Name).
	Sequence       *int64 `json:"sequence"`
	Duplicate      bool   `json:"duplicate"`
	Duplicates     *int64 `json:"duplicates"`
	ResumeSequence *int64 `json:"resumeSequence"`
}

// ingressStream is an open streaming POST: records go in through a pipe while receipts
// come back.
type ingressStream struct {
	pw       *io.PipeWriter
	resp     *http.Response
	receipts chan receipt // closed after the summary (or the end of the response)
	errc     chan error
	buf      []byte
}

var (
	h1Client  = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 200, DisableCompression: true}}
	h2cClient = func() *http.Client {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		return &http.Client{Transport: &http.Transport{Protocols: p, TLSClientConfig: &tls.Config{}}}
	}()
)

// openStream POSTs a RecordIO stream to path and asks for streamed receipts.
func openStream(t testing.TB, c *http.Client, url string, header map[string]string) *ingressStream {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	s := &ingressStream{pw: pw, receipts: make(chan receipt, 1<<16), errc: make(chan error, 1)}
	respc := make(chan *http.Response, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			s.errc <- err
			close(respc)
			close(s.receipts)
			return
		}
		respc <- resp
		defer resp.Body.Close()
		defer close(s.receipts)
		rd := recordio.NewReader(resp.Body)
		for {
			rec, err := rd.Next()
			if err != nil {
				if err != io.EOF {
					s.errc <- err
				}
				return
			}
			var r receipt
			if err := json.Unmarshal(rec, &r); err != nil {
				s.errc <- fmt.Errorf("receipt %q: %v", rec, err)
				return
			}
			if r.Summary {
				// The bridge has said its last word: end the body, as a client should
				// (a clean end: a body that fails makes the transport drop the connection).
				s.pw.Close()
			}
			s.receipts <- r
		}
	}()
	select {
	case resp, ok := <-respc:
		if !ok {
			t.Fatal(<-s.errc)
		}
		s.resp = resp
	case <-time.After(30 * time.Second):
		t.Fatal("no response headers within 30s")
	}
	return s
}

// send writes records (each marshalled as given) into the stream.
func (s *ingressStream) send(records ...[]byte) error {
	s.buf = s.buf[:0]
	for _, r := range records {
		s.buf = recordio.AppendRecord(s.buf, r)
	}
	_, err := s.pw.Write(s.buf)
	return err
}

// finish ends the request body and collects every remaining receipt and the summary.
func (s *ingressStream) finish(timeout time.Duration) ([]receipt, receipt, error) {
	s.pw.Close()
	return s.drain(timeout)
}

// drain collects receipts until the response ends.
func (s *ingressStream) drain(timeout time.Duration) ([]receipt, receipt, error) {
	var out []receipt
	var sum receipt
	deadline := time.After(timeout)
	for {
		select {
		case r, ok := <-s.receipts:
			if !ok {
				select {
				case err := <-s.errc:
					return out, sum, err
				default:
				}
				if !sum.Summary {
					return out, sum, fmt.Errorf("the response ended without a summary after %d receipts", len(out))
				}
				return out, sum, nil
			}
			if r.Summary {
				sum = r
				continue
			}
			out = append(out, r)
		case <-deadline:
			return out, sum, fmt.Errorf("no end of response within %s (%d receipts so far)", timeout, len(out))
		}
	}
}

// postOne sends a whole body at once and returns the status, headers and body.
func postOne(t testing.TB, url string, header map[string]string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h1Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}
