// Package broker gives tests and benchmarks a real Apache Pulsar standalone broker:
// the one named by PULSAR_URL and PULSAR_ADMIN_URL when they are set, otherwise one
// that Main starts with e2e/pulsar/pulsar.sh for the whole test binary and stops after.
//
// A broker whose state directory is known (PULSAR_STATE_DIR, set by with-broker.sh or by
// Main) can be killed with SIGKILL and restarted on the same data by fault tests.
package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Broker is a running Apache Pulsar standalone broker.
type Broker struct {
	URL      string // pulsar://host:port
	AdminURL string // http://host:port
	// StateDir is the pulsar.sh state directory; empty when the broker is not ours to control.
	StateDir string
	// TLSURL (pulsar+ssl://) and TLSCAFile name the broker's TLS listener and the CA that
	// signed its certificate; empty when it has none.
	TLSURL    string
	TLSCAFile string
	env       []string // environment for pulsar.sh (ports, state dir)
}

var (
	mu      sync.Mutex
	current *Broker
	// adminClient has its own transport so Main can close its idle connections
	// before a goroutine-leak check runs.
	adminClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
)

// ScriptPath is the absolute path of e2e/pulsar/pulsar.sh.
func ScriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "pulsar", "pulsar.sh")
}

// Main runs the tests of a package against a real broker and exits. Use it from TestMain:
//
//	func TestMain(m *testing.M) { broker.Main(m) }
//
// With PULSAR_URL set it uses that broker; otherwise it starts one on free loopback ports
// in a temporary state directory and stops it after the tests. The check function, when
// given, runs after the tests (a goroutine-leak check, say) and may fail the run.
func Main(m *testing.M, after ...func() error) {
	os.Exit(mainCode(m, after))
}

func mainCode(m *testing.M, after []func() error) int {
	b, stop, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: no Apache Pulsar broker: %v\n", err)
		return 1
	}
	mu.Lock()
	current = b
	mu.Unlock()
	code := m.Run()
	if stop != nil {
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: stopping the broker: %v\n", err)
		}
	}
	adminClient.CloseIdleConnections()
	if code == 0 {
		for _, f := range after {
			if err := f(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
				code = 1
			}
		}
	}
	return code
}

// Start returns the broker named by the environment, or starts one. stop is nil when the
// broker was not started here.
func Start() (b *Broker, stop func() error, err error) {
	if u := os.Getenv("PULSAR_URL"); u != "" {
		admin := os.Getenv("PULSAR_ADMIN_URL")
		if admin == "" {
			return nil, nil, errors.New("PULSAR_URL is set but PULSAR_ADMIN_URL is not: set both (e.g. eval \"$(e2e/pulsar/pulsar.sh env)\")")
		}
		b := &Broker{URL: u, AdminURL: strings.TrimRight(admin, "/"), StateDir: os.Getenv("PULSAR_STATE_DIR"),
			TLSURL: os.Getenv("PULSAR_TLS_URL"), TLSCAFile: os.Getenv("PULSAR_TLS_CA_FILE")}
		b.env = os.Environ()
		return b, nil, b.waitHealthy(30 * time.Second)
	}
	state, err := os.MkdirTemp("", "bridge-pulsar-")
	if err != nil {
		return nil, nil, err
	}
	// Another broker started at the same moment (another suite, another test binary) may
	// take the ports chosen here between the choice and the bind; pulsar.sh then exits 75
	// (it checks that the process it started holds its ports) and the start is tried again
	// on other ports.
	var ports []int
	for attempt := 1; ; attempt++ {
		if ports, err = FreePorts(5); err != nil {
			return nil, nil, err
		}
		b = &Broker{
			URL:      fmt.Sprintf("pulsar://127.0.0.1:%d", ports[0]),
			AdminURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
			StateDir: state,
		}
		b.env = append(os.Environ(), PortEnv(state, ports)...)
		err = b.script("start")
		if err == nil {
			break
		}
		_ = b.script("stop")
		if !PortsTaken(err) || attempt == 5 {
			return nil, nil, err
		}
		_ = os.RemoveAll(filepath.Join(state, "data"))
	}
	if ca := filepath.Join(state, "tls", "ca.crt"); fileExists(ca) {
		b.TLSURL, b.TLSCAFile = fmt.Sprintf("pulsar+ssl://127.0.0.1:%d", ports[3]), ca
	}
	stop = func() error {
		err := b.script("stop")
		if os.Getenv("KEEP_PULSAR_STATE") == "" {
			_ = os.RemoveAll(state)
		}
		return err
	}
	return b, stop, nil
}

// Get returns the broker of this test run; Main must have started it.
func Get(t testing.TB) *Broker {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if current == nil {
		t.Fatal("broker.Get: no broker; call broker.Main(m) from TestMain")
	}
	return current
}

func (b *Broker) script(args ...string) error {
	cmd := exec.Command(ScriptPath(), args...)
	cmd.Env = b.env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pulsar.sh %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// Controllable reports whether Kill and Restart can act on this broker.
func (b *Broker) Controllable() bool { return b.StateDir != "" }

func (b *Broker) requireControl(t testing.TB) {
	t.Helper()
	if !b.Controllable() {
		t.Skip("the broker at PULSAR_URL was not started by pulsar.sh (PULSAR_STATE_DIR unset), so this fault test cannot kill it")
	}
}

// Kill sends SIGKILL to the broker process and waits for it to be gone.
func (b *Broker) Kill(t testing.TB) {
	t.Helper()
	b.requireControl(t)
	if err := b.script("kill"); err != nil {
		t.Fatal(err)
	}
}

// Freeze stops the broker's process with SIGSTOP (a frozen JVM: connections stay open,
// nothing is read or answered) and returns the function that resumes it with SIGCONT;
// the test's cleanup resumes it too, whatever happens. Keep a freeze to seconds: past
// its metadata session timeout a standalone broker loses its own registration ("No
// available broker found") until restarted; resume it before closing clients, whose
// Close would wait on the frozen broker.
func (b *Broker) Freeze(t testing.TB) (thaw func()) {
	t.Helper()
	b.requireControl(t)
	raw, err := os.ReadFile(filepath.Join(b.StateDir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		t.Fatalf("broker pid file: %q", raw)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT to the broker (pid %d): %v", pid, err)
			}
		})
	}
	t.Cleanup(thaw)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return thaw
}

// StartAgain starts a killed or stopped broker on the same data and waits until healthy.
func (b *Broker) StartAgain(t testing.TB) {
	t.Helper()
	b.requireControl(t)
	if err := b.script("start"); err != nil {
		t.Fatal(err)
	}
}

// Restart kills the broker with SIGKILL and starts it again on the same data.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	b.Kill(t)
	b.StartAgain(t)
}

func (b *Broker) waitHealthy(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		code, body, err := b.Admin(context.Background(), http.MethodGet, "/admin/v2/brokers/health", nil)
		if err == nil && code == http.StatusOK {
			return nil
		}
		last = fmt.Errorf("health check: status %d %s %v", code, body, err)
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("broker at %s not healthy after %s: %w", b.AdminURL, d, last)
}

// Admin calls the broker's admin REST API. body, when not nil, is sent as JSON.
func (b *Broker) Admin(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return AdminRequest(ctx, adminClient, method, b.AdminURL+path, "", body)
}

// AdminRequest calls an admin REST API at url through client, with the bearer token
// when it is not empty; body, when not nil, is sent as JSON. It returns the status and
// the response's body.
func AdminRequest(ctx context.Context, client *http.Client, method, url, token string, body []byte) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// MustAdmin calls the admin API and fails the test unless the status is 2xx.
func (b *Broker) MustAdmin(t testing.TB, method, path string, body []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, out, err := b.Admin(ctx, method, path, body)
	if err != nil {
		t.Fatalf("admin %s %s: %v", method, path, err)
	}
	if code/100 != 2 {
		t.Fatalf("admin %s %s: status %d: %s", method, path, code, out)
	}
	return out
}

// Topic returns a fresh persistent topic name in public/default, unique to this call.
func (b *Broker) Topic(t testing.TB, prefix string) string {
	t.Helper()
	return "persistent://public/default/" + Name(prefix)
}

// Name returns prefix-<random hex>, safe as a topic, subscription or namespace name.
func Name(prefix string) string {
	var buf [6]byte
	if _, err := rand.Read(buf[:]); err != nil {
		panic(err)
	}
	return prefix + "-" + hex.EncodeToString(buf[:])
}

// CreatePartitionedTopic creates topic (persistent://tenant/ns/name) with n partitions.
func (b *Broker) CreatePartitionedTopic(t testing.TB, topic string, n int) {
	t.Helper()
	b.MustAdmin(t, http.MethodPut, "/admin/v2/"+restPath(topic)+"/partitions", []byte(strconv.Itoa(n)))
}

// Namespace creates a fresh namespace in the public tenant and returns "public/<name>".
func (b *Broker) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := "public/" + Name(prefix)
	b.MustAdmin(t, http.MethodPut, "/admin/v2/namespaces/"+ns, []byte("{}"))
	return ns
}

// SetDeduplication turns broker-side message deduplication on or off for a namespace.
func (b *Broker) SetDeduplication(t testing.TB, namespace string, on bool) {
	t.Helper()
	b.MustAdmin(t, http.MethodPost, "/admin/v2/namespaces/"+namespace+"/deduplication", []byte(strconv.FormatBool(on)))
}

// restPath turns persistent://tenant/ns/topic into persistent/tenant/ns/topic.
func restPath(topic string) string {
	return strings.Replace(topic, "://", "/", 1)
}

// FreePorts returns n loopback TCP ports that were free when it was called.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// PortEnv is the environment that starts pulsar.sh with state directory state on ports
// (broker, web, bookie, TLS, ZooKeeper; FreePorts(5) gives them).
func PortEnv(state string, ports []int) []string {
	return []string{
		"PULSAR_STATE_DIR=" + state,
		"PULSAR_BROKER_PORT=" + strconv.Itoa(ports[0]),
		"PULSAR_WEB_PORT=" + strconv.Itoa(ports[1]),
		"PULSAR_BOOKIE_PORT=" + strconv.Itoa(ports[2]),
		"PULSAR_BROKER_TLS_PORT=" + strconv.Itoa(ports[3]),
		"PULSAR_ZOOKEEPER_PORT=" + strconv.Itoa(ports[4]),
	}
}

// PortsTaken reports whether a pulsar.sh start failed because another process holds one of
// its ports (exit status 75): the start can be tried again on other ports.
func PortsTaken(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == 75
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// BatchIndexAcks reports whether the broker keeps batch-index acknowledgements (PIP-54,
// acknowledgmentAtBatchIndexLevelEnabled; the suite's brokers turn it on, Pulsar's default
// is off). Off, the broker ignores a partial ack_set and redelivers whole batches:
// acknowledged batch-mates come again after a reconnect or a redelivery (duplicates, never
// loss), so the tests that count them say which broker they ran on.
func (b *Broker) BatchIndexAcks(t testing.TB) bool {
	t.Helper()
	out := b.MustAdmin(t, http.MethodGet, "/admin/v2/brokers/configuration/runtime", nil)
	var conf map[string]string
	if err := json.Unmarshal(out, &conf); err != nil {
		t.Fatalf("the broker's runtime configuration: %v: %.200s", err, out)
	}
	v, ok := conf["acknowledgmentAtBatchIndexLevelEnabled"]
	if !ok {
		t.Fatalf("the broker's runtime configuration has no acknowledgmentAtBatchIndexLevelEnabled: %.200s", out)
	}
	return v == "true"
}
