package chaos

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/bridgebin"
	"github.com/recordio-bridge/bridge/internal/logbuf"
)

// bridgeBin is the binary under test (bridgebin.Path).
func bridgeBin(t testing.TB) string {
	t.Helper()
	return bridgebin.Path(t, filepath.Join("..", ".."))
}

// bridge is the bridge binary run on fixed ports, so it can be killed and started again
// where its clients expect it.
type bridge struct {
	t           testing.TB
	readyWithin time.Duration
	config      string
	DataURL     string
	OpsURL      string
	logs        *logbuf.Buffer
	mu          sync.Mutex
	cmd         *exec.Cmd
	exited      chan struct{}
}

// startBridge writes cfg (without the listen section) and runs the binary until /readyz is 200.
func startBridge(t testing.TB, cfg string) *bridge {
	t.Helper()
	return startBridgeReady(t, cfg, 90*time.Second)
}

// startBridgeReady is startBridge with the time the bridge has to become ready (also after
// each restart).
func startBridgeReady(t testing.TB, cfg string, readyWithin time.Duration) *bridge {
	t.Helper()
	data, ops := freePort(t), freePort(t)
	b := &bridge{t: t, readyWithin: readyWithin, config: filepath.Join(t.TempDir(), "config.yaml"), logs: &logbuf.Buffer{},
		DataURL: fmt.Sprintf("http://127.0.0.1:%d", data), OpsURL: fmt.Sprintf("http://127.0.0.1:%d", ops)}
	full := fmt.Sprintf("listen:\n  data: 127.0.0.1:%d\n  ops: 127.0.0.1:%d\n  pprof: true\nmemory:\n  limit: %s\n%s", data, ops, memoryLimitYAML, cfg)
	if err := os.WriteFile(b.config, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	// Registered before the start: a start that fails (not ready in time) must not leave
	// the process behind either.
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			t.Logf("bridge logs (tail):\n%s", tail(b.logs.String(), 80))
		}
	})
	b.start()
	return b
}

func (b *bridge) start() {
	b.t.Helper()
	cmd := exec.Command(bridgeBin(b.t), "run", "-config", b.config, "-log-level", "info")
	cmd.Stdout, cmd.Stderr = b.logs, b.logs
	// Should the test binary itself die (its -timeout, a crash), the bridge dies with it.
	cmd.SysProcAttr = diesWithParent()
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.mu.Lock()
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	deadline := time.Now().Add(b.readyWithin)
	for {
		resp, err := http.Get(b.OpsURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-exited:
			b.t.Fatalf("bridge exited at start-up:\n%s", tail(b.logs.String(), 40))
		default:
		}
		if time.Now().After(deadline) {
			b.kill9()
			b.t.Fatalf("bridge not ready after %s (killed it):\n%s", b.readyWithin, tail(b.logs.String(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill9 kills the bridge with SIGKILL and waits for it to be gone.
func (b *bridge) kill9() {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the bridge with SIGTERM (SIGKILL after 60 s).
func (b *bridge) stop() {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		b.t.Errorf("bridge still running 60s after SIGTERM")
		_ = cmd.Process.Kill()
		<-exited
	}
}

// memoryLimit is the bridge's memory.limit in these tests; its resident memory must stay below.
const (
	memoryLimit     = 512 << 20
	memoryLimitYAML = "512MiB"
)

// goroutines is the bridge's goroutine count (from its pprof endpoint), or -1.
func (b *bridge) goroutines() int {
	resp, err := http.Get(b.OpsURL + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var total int
	if _, err := fmt.Fscanf(resp.Body, "goroutine profile: total %d", &total); err != nil {
		return -1
	}
	return total
}

// metricSums is one scrape of the bridge's /metrics: each sample's value summed by metric
// name over its labels (comments and exemplars left out), or nil when it does not answer.
// One scrape, so the figures it gives are of one instant.
func (b *bridge) metricSums() map[string]float64 {
	resp, err := http.Get(b.OpsURL + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	sums := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		l, _, _ = strings.Cut(l, " # ") // an exemplar
		name := l[:strings.IndexAny(l+" ", "{ ")]
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil
		}
		sums[name] += v
	}
	return sums
}

// reconnects is the bridge's bridge_pulsar_reconnects_total, producers' and consumers'
// summed, from its /metrics, or -1 when it does not answer.
func (b *bridge) reconnects() int64 {
	m := b.metricSums()
	if m == nil {
		return -1
	}
	return int64(m["bridge_pulsar_reconnects_total"])
}

// load is the bridge's goroutines and the ingress and egress streams it has open, from one
// scrape of its /metrics (so of one instant), or ok false when it does not answer.
func (b *bridge) load() (goroutines, ingress, egress int, ok bool) {
	m := b.metricSums()
	g, found := m["go_goroutines"]
	if !found {
		return 0, 0, 0, false
	}
	return int(g), int(m["bridge_ingress_streams_active"]), int(m["bridge_egress_streams_active"]), true
}

// rssBytes is the bridge's resident memory now (Linux).
func (b *bridge) rssBytes() int64 {
	b.mu.Lock()
	pid := b.cmd.Process.Pid
	b.mu.Unlock()
	out, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// threads is the bridge's OS thread count now (Linux).
func (b *bridge) threads() int {
	b.mu.Lock()
	pid := b.cmd.Process.Pid
	b.mu.Unlock()
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return len(ents)
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
