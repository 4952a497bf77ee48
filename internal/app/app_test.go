package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/recordio"
)

func TestMain(m *testing.M) {
	pulsartest.PoisonReleasedFrames(true) // a record read from a released frame reads the poison
	goleak.VerifyTestMain(m,
		// fsnotify's and OpenTelemetry's package-level goroutines, started once per process.
		goleak.IgnoreAnyFunction("go.opentelemetry.io/otel/sdk/metric.(*PeriodicReader).run"))
}

const baseConfig = `listen:
  data: 127.0.0.1:0
  ops: localhost:0
%s
routes:
  - name: r
    default: {topic: t}
`

// newApp starts an App on loopback ports against a fake broker; extra is YAML put
// after the listen block (for example "  pprof: true").
func newApp(t *testing.T, extra string) (*App, string) {
	t.Helper()
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	writeConfig(t, path, b.URL(), extra)
	a, err := New(Options{ConfigPath: path, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return a, path
}

// runUntilCleanup runs a until the test ends, then shuts it down and waits for Run to return.
func runUntilCleanup(t *testing.T, a *App) {
	t.Helper()
	ran := make(chan error, 1)
	go func() { ran <- a.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
		<-ran
	})
}

func writeConfig(t *testing.T, path, url, extra string) {
	t.Helper()
	cfg := strings.Replace(baseConfig, "%s", extra+"\npulsar:\n  url: "+url, 1)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return rec.Code, body
}

// Putting the good file back after a refused one is how a bad ConfigMap is undone: it
// must be a reload that clears lastReloadError, not "unchanged".
func TestReloadOfTheGoodFileAfterARefusedOneClearsTheError(t *testing.T) {
	a, path := newApp(t, "")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ops := a.opsHandler()
	if err := os.WriteFile(path, []byte("ingress:\n  maxStreams: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload("test"); err == nil {
		t.Fatal("a bad file was accepted")
	}
	if _, body := get(t, ops, "/readyz"); body["lastReloadError"] == nil {
		t.Fatalf("/readyz %v lacks the refused reload's error", body)
	}
	if m := metricsText(t, ops); !strings.Contains(m, "\nbridge_config_reload_success 0\n") {
		t.Fatalf("/metrics after a refused reload:\n%s", m)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, ops, "/readyz"); body["lastReloadError"] != nil || code != http.StatusOK {
		t.Fatalf("/readyz %d %v after the good file came back", code, body)
	}
	if m := metricsText(t, ops); !strings.Contains(m, "\nbridge_config_reload_success 1\n") || !strings.Contains(m, "\nbridge_ready 1\n") ||
		!strings.Contains(m, "\nbridge_pulsar_broker_up 1\n") {
		t.Fatalf("/metrics after the good file came back:\n%s", m)
	}
}

func metricsText(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func TestPprofIsOffByDefaultAndFollowsReload(t *testing.T) {
	a, path := newApp(t, "")
	ops := a.opsHandler()
	if code, _ := get(t, ops, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ answered %d with listen.pprof off", code)
	}
	writeConfig(t, path, a.running.Pulsar.URL, "  pprof: true")
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, ops, "/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("/debug/pprof/ answered %d with listen.pprof on", code)
	}
	if code, _ := get(t, ops, "/debug/pprof/cmdline"); code != http.StatusOK {
		t.Fatalf("/debug/pprof/cmdline answered %d", code)
	}
}

// Shutdown with streams open: an ingress stream whose client keeps its body open and an
// egress stream. It returns, Run returns, and nothing is left running (goleak).
func TestShutdownEndsOpenStreamsAndLeavesNothingRunning(t *testing.T) {
	a, _ := newApp(t, "streams:\n  - name: s\n    topics: [t]\n")
	ran := make(chan error, 1)
	go func() { ran <- a.Run(context.Background()) }()
	base := "http://" + a.DataAddr().String()

	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/publish/r", pr)
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	ingressDone := make(chan []string, 1)
	started := make(chan struct{})
	go func() {
		resp, err := client.Do(req)
		close(started)
		if err != nil {
			ingressDone <- []string{"error: " + err.Error()}
			return
		}
		defer resp.Body.Close()
		var recs []string
		rd := recordio.NewReader(resp.Body)
		for {
			b, err := rd.Next()
			if err != nil {
				ingressDone <- recs
				return
			}
			recs = append(recs, string(b))
		}
	}()
	if _, err := pw.Write(recordio.AppendRecord(nil, []byte(`{"a":1}`))); err != nil {
		t.Fatal(err)
	}
	<-started

	ereq, _ := http.NewRequest(http.MethodGet, base+"/v1/streams/s", nil)
	ereq.Header.Set("Accept", "application/recordio")
	eresp, err := client.Do(ereq)
	if err != nil {
		t.Fatal(err)
	}
	defer eresp.Body.Close()
	egressDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, eresp.Body)
		egressDone <- err
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- a.Shutdown(ctx) }()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v (every stream could end in time)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs := <-ingressDone
	if len(recs) == 0 || !strings.Contains(recs[len(recs)-1], `"summary":true`) {
		t.Fatalf("ingress stream ended with %q, want a summary last", recs)
	}
	if err := <-egressDone; err != nil {
		t.Fatalf("egress stream: %v", err)
	}
}

// TestMetricLabelsNameOnlyConfiguredRoutesAndStreams: a templated route publishing to
// hundreds of topics, and requests to paths no route or stream has, add no series:
// /metrics has as many after 200 topics as after 2, and every route and stream label
// is a configured name.
func TestMetricLabelsNameOnlyConfiguredRoutesAndStreams(t *testing.T) {
	a, path := newApp(t, "streams:\n  - name: s\n    topics: [t]")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(raw), "routes:\n", "routes:\n  - name: tmpl\n    namespaces: [public/default]\n    default: {topic: \"card-{json:k}\"}\n", 1)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	base := "http://" + a.DataAddr().String()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	traffic := func(from, to int) {
		t.Helper()
		var body []byte
		for i := from; i < to; i++ {
			body = recordio.AppendRecord(body, []byte(fmt.Sprintf(`{"k":"k%d"}`, i)))
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/publish/tmpl", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/recordio")
		req.Header.Set("Message-Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("publish: %d", resp.StatusCode)
		}
		for i := from; i < to; i += 10 { // unknown ingress and egress paths
			for _, r := range []struct{ method, path string }{{"POST", "/v1/publish/nope-%d"}, {"GET", "/v1/streams/nope-%d"}} {
				req, _ := http.NewRequest(r.method, base+fmt.Sprintf(r.path, i), strings.NewReader(""))
				req.Header.Set("Content-Type", "application/recordio")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
		}
	}
	series := func() []string {
		t.Helper()
		rec := httptest.NewRecorder()
		a.opsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		var out []string
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(line, "bridge_") {
				out = append(out, line[:strings.LastIndexByte(line, ' ')])
			}
		}
		return out
	}
	traffic(0, 2)
	few := series()
	traffic(2, 200)
	many := series()
	if len(many) != len(few) {
		t.Errorf("%d series after 2 topics, %d after 200", len(few), len(many))
	}
	label := regexp.MustCompile(`\b(route|stream)="([^"]*)"`)
	for _, s := range many {
		for _, m := range label.FindAllStringSubmatch(s, -1) {
			if m[2] != "tmpl" && m[2] != "s" && m[2] != "r" {
				t.Errorf("series %s: %s %q is no configured name", s, m[1], m[2])
			}
		}
	}
	if !slicesContain(many, `bridge_ingress_records_total{route="tmpl",status="200"}`) {
		t.Fatalf("the traffic is not on /metrics:\n%s", strings.Join(many, "\n"))
	}
}

func slicesContain(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
