package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// cluster is the production-shaped Pulsar of e2e/pulsar/cluster.sh: two brokers, TLS per
// broker, token authn/authz and a proxy.
type cluster struct {
	Script, StateDir               string
	Broker1URL, Broker1TLS         string
	Broker1Admin                   string
	Broker2URL, Broker2TLS         string
	Broker2Admin                   string
	ProxyURL, ProxyWebURL          string
	CAFile                         string
	SuperuserToken, BridgeToken    string // the tokens themselves
	SuperuserFile, BridgeTokenFile string
	env                            []string
}

var (
	// The cluster is started by the first test that needs it (the judges' unit tests do
	// not), and stopped after the last test.
	theCluster  *cluster
	clusterErr  error
	clusterStop func()
	clusterOnce sync.Once
	full        = os.Getenv("CHAOS_FULL") != "" // make chaos: the whole matrix
	rowsMu      sync.Mutex
	rows        []row
	adminHTTP   = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 60 * time.Second,
		// Admin calls redirect between the brokers (127.0.0.1 and 127.0.0.2); the token goes along.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return fmt.Errorf("%d redirects", len(via))
			}
			req.Header.Set("Authorization", via[0].Header.Get("Authorization"))
			return nil
		}}
)

// row is one line of the results table.
type row struct {
	Fault, Load                          string
	Receipted, Present, Lost, Duplicated int
	InFlight                             int // records in flight at the faults: what may be duplicated
	EgressMissing                        int
	Disturbance                          string // what the fault did to the load
	Recovered                            string
	Memory                               string // peak RSS, goroutines before -> after
	Result                               string
}

// addRow adds a line to the table; with CHAOS_TABLE set the file is rewritten at once, so
// a run cut short by its timeout still leaves the rows it has.
func addRow(r row) {
	rowsMu.Lock()
	rows = append(rows, r)
	rowsMu.Unlock()
	if f := os.Getenv("CHAOS_TABLE"); f != "" {
		_ = os.WriteFile(f, []byte(table()), 0o644)
	}
}

// table renders the results as the Markdown table docs/chaos.md carries.
func table() string {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	var b strings.Builder
	b.WriteString("| fault | load | receipted | present | lost | duplicated | in flight at faults | egress missing | disturbance | recovered in | peak RSS, goroutines | result |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n", r.Fault, r.Load, r.Receipted, r.Present, r.Lost, r.Duplicated, r.InFlight, r.EgressMissing, r.Disturbance, r.Recovered, r.Memory, r.Result)
	}
	return b.String()
}

func TestMain(m *testing.M) {
	os.Exit(mainCode(m))
}

func mainCode(m *testing.M) int {
	code := m.Run()
	if len(rows) > 0 {
		t := table()
		fmt.Println("\n" + t)
		if f := os.Getenv("CHAOS_TABLE"); f != "" {
			_ = os.WriteFile(f, []byte(t), 0o644)
		}
	}
	if clusterStop != nil {
		clusterStop()
	}
	adminHTTP.CloseIdleConnections()
	ingressHTTP.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(
			// The official client (the oracle, not our code) leaves these behind (v0.19.0).
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*chunkedMsgCtxMap).discardChunkIfExpire"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
			code = 1
		}
	}
	return code
}

func scriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "pulsar", "cluster.sh")
}

// startCluster uses the cluster named by CHAOS_STATE_DIR (cluster.sh env), or starts one
// on free loopback ports in a temporary directory and returns how to stop it.
func startCluster() (*cluster, func(), error) {
	env := os.Environ()
	var stop func()
	if os.Getenv("CHAOS_STATE_DIR") == "" {
		dir, err := os.MkdirTemp("", "bridge-cluster-")
		if err != nil {
			return nil, nil, err
		}
		// Without CLUSTER_PORT_BASE the ports are chosen here, from a random base, so two
		// suites started at once rarely choose the same ones; when they did, a member
		// finds its port held by the other's and cluster.sh exits 75: the start is tried
		// again from another base.
		fixed := os.Getenv("CLUSTER_PORT_BASE")
		for attempt := 1; ; attempt++ {
			base := fixed
			if base == "" {
				b, err := freeRange(17600+100*mathrand.IntN(20), 23)
				if err != nil {
					return nil, nil, err
				}
				base = strconv.Itoa(b)
			}
			env = append(os.Environ(), "CLUSTER_STATE_DIR="+dir, "CLUSTER_PORT_BASE="+base)
			out, err := run(env, scriptPath(), "start")
			if err == nil {
				break
			}
			_, _ = run(env, scriptPath(), "stop")
			if !portsTaken(err) || fixed != "" || attempt == 5 {
				return nil, nil, fmt.Errorf("cluster.sh start: %v\n%s", err, out)
			}
			fmt.Fprintf(os.Stderr, "chaos: ports from %s taken by another process; starting the cluster again on others (attempt %d of 5)\n", base, attempt+1)
			if err := os.RemoveAll(dir); err != nil {
				return nil, nil, err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, nil, err
			}
		}
		stop = func() {
			if out, err := run(env, scriptPath(), "stop"); err != nil {
				fmt.Fprintf(os.Stderr, "chaos: cluster.sh stop: %v\n%s", err, out)
			}
			if os.Getenv("KEEP_PULSAR_STATE") == "" {
				_ = os.RemoveAll(dir)
			}
		}
	}
	out, err := run(env, scriptPath(), "env")
	if err != nil {
		return nil, stop, fmt.Errorf("cluster.sh env: %v\n%s", err, out)
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			vars[k] = v
			env = append(env, k+"="+v)
		}
	}
	c := &cluster{Script: scriptPath(), StateDir: vars["CHAOS_STATE_DIR"],
		Broker1URL: vars["CHAOS_BROKER1_URL"], Broker1TLS: vars["CHAOS_BROKER1_TLS_URL"], Broker1Admin: vars["CHAOS_BROKER1_ADMIN_URL"],
		Broker2URL: vars["CHAOS_BROKER2_URL"], Broker2TLS: vars["CHAOS_BROKER2_TLS_URL"], Broker2Admin: vars["CHAOS_BROKER2_ADMIN_URL"],
		ProxyURL: vars["CHAOS_PROXY_URL"], ProxyWebURL: vars["CHAOS_PROXY_WEB_URL"], CAFile: vars["CHAOS_TLS_CA_FILE"],
		SuperuserFile: vars["CHAOS_SUPERUSER_TOKEN_FILE"], BridgeTokenFile: vars["CHAOS_BRIDGE_TOKEN_FILE"], env: env}
	for _, f := range []struct {
		dst  *string
		path string
	}{{&c.SuperuserToken, c.SuperuserFile}, {&c.BridgeToken, c.BridgeTokenFile}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return nil, stop, err
		}
		*f.dst = strings.TrimSpace(string(b))
	}
	return c, stop, nil
}

func run(env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.Dir = filepath.Dir(name) // not the test's directory, which a checkout may replace under it
	return cmd.CombinedOutput()
}

// script runs cluster.sh with args (kill broker2, start1 broker2, ...).
func (c *cluster) script(t testing.TB, args ...string) {
	t.Helper()
	if out, err := run(c.env, c.Script, args...); err != nil {
		t.Fatalf("cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// heal runs cluster.sh heal: every member back to serving (a stopped broker continued, a
// dead member started, a proxy that does not serve lookups restarted). It returns what it
// repaired, one line each, and an error when it could not.
func (c *cluster) heal() ([]string, error) {
	out, err := run(c.env, c.Script, "heal")
	var repaired []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "repaired: ") {
			repaired = append(repaired, strings.TrimPrefix(l, "repaired: "))
		}
	}
	if err != nil {
		return repaired, fmt.Errorf("cluster.sh heal: %v\n%s", err, out)
	}
	return repaired, nil
}

// useCluster starts a test on the cluster: it must serve now (a test before that broke it
// and could not repair it fails this one at once, saying so, instead of through a dead
// proxy minutes later), and once the test is over (after its own cleanups) it must still
// serve: what the test left broken is repaired and the test fails, naming it.
func useCluster(t testing.TB) *cluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterStop, clusterErr = startCluster() })
	if clusterErr != nil {
		t.Fatalf("no cluster: %v", clusterErr)
	}
	c := theCluster
	repaired, err := c.heal()
	if err != nil {
		t.Fatalf("the cluster is broken before this test and could not be repaired: %v", err)
	}
	if len(repaired) > 0 {
		t.Logf("the cluster was broken before this test; repaired: %s", strings.Join(repaired, "; "))
	}
	t.Cleanup(func() {
		repaired, err := c.heal()
		switch {
		case err != nil:
			t.Errorf("this test left the cluster broken and it could not be repaired (the next tests will fail on it): %v", err)
		case len(repaired) > 0:
			t.Errorf("this test left the cluster broken; repaired: %s", strings.Join(repaired, "; "))
		}
	})
	return c
}

// pid is the process id of broker1, broker2 or proxy.
func (c *cluster) pid(t testing.TB, name string) int {
	t.Helper()
	out, err := run(c.env, c.Script, "pid", name)
	if err != nil {
		t.Fatalf("cluster.sh pid %s: %v\n%s", name, err, out)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		t.Fatalf("cluster.sh pid %s: no output", name)
	}
	p, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// admin calls a broker's admin API as the superuser and returns the status and body.
func (c *cluster) admin(ctx context.Context, method, url string, body string) (int, []byte, error) {
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return broker.AdminRequest(ctx, adminHTTP, method, url, c.SuperuserToken, b)
}

// mustAdmin calls the admin API and fails the test unless it answers 2xx; a 5xx (a bundle
// being moved, a broker just restarted) is tried again, up to five times.
func (c *cluster) mustAdmin(t testing.TB, method, url, body string) []byte {
	t.Helper()
	var code int
	var out []byte
	var err error
	for try := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		code, out, err = c.admin(ctx, method, url, body)
		cancel()
		if err == nil && code/100 == 2 {
			return out
		}
		if err == nil && code < 500 {
			break
		}
		time.Sleep(time.Duration(try+1) * time.Second)
	}
	t.Fatalf("admin %s %s: %d %s %v", method, url, code, out, err)
	return nil
}

// owner is the broker (host:port of its pulsar:// URL) that owns topic now.
func (c *cluster) owner(t testing.TB, topic string) string {
	t.Helper()
	out := c.mustAdmin(t, http.MethodGet, c.Broker1Admin+"/lookup/v2/topic/"+strings.Replace(topic, "://", "/", 1), "")
	i := strings.Index(string(out), `"brokerUrl":"`)
	if i < 0 {
		t.Fatalf("lookup of %s: %s", topic, out)
	}
	s := string(out[i+len(`"brokerUrl":"`):])
	return s[:strings.IndexByte(s, '"')]
}

var (
	portMu   sync.Mutex
	nextPort = envInt("CHAOS_PORT_BASE", 47800)
)

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

// freePort hands out loopback ports from CHAOS_PORT_BASE (47800) upwards, skipping busy ones.
func freePort(t testing.TB) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		p := nextPort
		nextPort++
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// portsTaken reports whether cluster.sh failed because another process holds one of its
// ports (exit status 75).
func portsTaken(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == 75
}

// freeRange finds n consecutive free ports from start on, in steps of 100.
func freeRange(start, n int) (int, error) {
	for base := start; base < start+2000; base += 100 {
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports from %d", n, start)
}

// sortedKeys is for stable error messages.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// countLines lists counts a line each, "  count× what", in the order of what: the failures
// and errors a scenario logs.
func countLines(counts map[string]int) string {
	var b strings.Builder
	for _, k := range sortedKeys(counts) {
		fmt.Fprintf(&b, "  %6d× %s\n", counts[k], k)
	}
	return b.String()
}
