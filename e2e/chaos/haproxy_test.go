package chaos

import (
	"bufio"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/logbuf"
)

// balancer is Debian's HAProxy in front of bridge replicas, run by the test from a
// configuration it writes: HTTP mode, health checks on each replica's ops /readyz, and a
// cookie that brings a client's acknowledgements to the replica serving its egress stream.
type balancer struct {
	URL      string // the frontend, where clients send everything
	statsURL string
	logs     *logbuf.Buffer
	cmd      *exec.Cmd
	exited   chan struct{}
}

// haproxyCookie is the affinity cookie HAProxy inserts into each response, naming the
// replica that answered it.
const haproxyCookie = "BRIDGE_REPLICA"

// startBalancer runs HAProxy on a free port in front of the replicas and waits until it
// reports every one of them up.
func startBalancer(t testing.TB, replicas []*bridge) *balancer {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("no haproxy on PATH (apt-get install haproxy)")
	}
	front, stats := freePort(t), freePort(t)
	var servers strings.Builder
	for i, r := range replicas {
		data, _ := url.Parse(r.DataURL)
		ops, _ := url.Parse(r.OpsURL)
		// Checked on the ops port's /readyz every 500 ms: down after 2 failures, up after 2
		// successes.
		fmt.Fprintf(&servers, "    server r%d %s check port %s inter 500ms fall 2 rise 2 cookie r%d\n", i+1, data.Host, ops.Port(), i+1)
	}
	cfg := fmt.Sprintf(`global
    maxconn 4000

defaults
    mode http
    timeout connect 2s
    # Streams last: ingress requests send and receive at once for as long as the client
    # streams, egress responses for as long as the client reads.
    timeout client 10m
    timeout server 10m
    timeout http-request 30s
    timeout tunnel 10m
    option http-no-delay
    # A client that went away takes its server connection with it (an egress stream's
    # heartbeats find it otherwise, at their next write).
    option abortonclose
    # A replica that refuses the connection (killed, not yet marked down) is left for another.
    retries 2
    option redispatch 1

frontend bridges
    bind 127.0.0.1:%d
    default_backend replicas

frontend stats
    bind 127.0.0.1:%d
    stats enable
    stats uri /stats

backend replicas
    balance leastconn
    option httpchk GET /readyz
    http-check expect status 200
    cookie %s insert indirect nocache
%s`, front, stats, haproxyCookie, servers.String())
	dir := t.TempDir()
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	lb := &balancer{URL: fmt.Sprintf("http://127.0.0.1:%d", front), statsURL: fmt.Sprintf("http://127.0.0.1:%d/stats;csv", stats),
		logs: &logbuf.Buffer{}, exited: make(chan struct{})}
	// -db: stay in the foreground; -W: master-worker, so the worker dies with its master.
	lb.cmd = exec.Command(bin, "-db", "-W", "-f", path)
	lb.cmd.Stdout, lb.cmd.Stderr = lb.logs, lb.logs
	lb.cmd.SysProcAttr = diesWithParent()
	if err := lb.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = lb.cmd.Wait(); close(lb.exited) }()
	t.Cleanup(func() {
		_ = lb.cmd.Process.Kill()
		<-lb.exited
		if t.Failed() {
			t.Logf("haproxy logs (tail):\n%s", tail(lb.logs.String(), 40))
		}
	})
	if !waitFor(t.Context(), 30*time.Second, func() bool { return isClosed(lb.exited) || lb.up() == len(replicas) }) || isClosed(lb.exited) {
		t.Fatalf("haproxy does not report the %d replicas up within 30 s (%v):\n%s", len(replicas), lb.status(), tail(lb.logs.String(), 20))
	}
	return lb
}

// status is each replica's state as HAProxy sees it (r1: UP, r2: DOWN, ...).
func (lb *balancer) status() map[string]string {
	resp, err := http.Get(lb.statsURL)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	st := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		// # pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,...
		if len(f) > 17 && f[0] == "replicas" && strings.HasPrefix(f[1], "r") {
			st[f[1]] = f[17]
		}
	}
	return st
}

// up is the number of replicas HAProxy reports up.
func (lb *balancer) up() int {
	n := 0
	for _, s := range lb.status() {
		if strings.HasPrefix(s, "UP") {
			n++
		}
	}
	return n
}

// waitUp waits until HAProxy reports replica i (from 0) up again after a restart.
func (lb *balancer) waitUp(t testing.TB, i int) {
	t.Helper()
	name := fmt.Sprintf("r%d", i+1)
	if !waitFor(t.Context(), 30*time.Second, func() bool { return strings.HasPrefix(lb.status()[name], "UP") }) {
		t.Fatalf("haproxy does not report %s up within 30 s of its restart (%v)", name, lb.status())
	}
}
