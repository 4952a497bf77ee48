package chaos

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/faultproxy"
)

// pick returns short in make test, long in make chaos.
func pick[T any](short, long T) T {
	if full {
		return long
	}
	return short
}

func baseLoad() load {
	return load{ingress: pick(4, 8), egress: pick(4, 8), topics: 4, pace: pick(20*time.Millisecond, 10*time.Millisecond)}
}

// steady lets the load run for d (the fault's duration).
func steady(d time.Duration) { time.Sleep(d) }

// TestBrokerKill9AndRestart: broker 2 (it owns some of the topics) is killed with SIGKILL
// and started again, again and again, with deduplication on.
func TestBrokerKill9AndRestart(t *testing.T) {
	n := pick(1, 10)
	scenario(t, fmt.Sprintf("broker kill -9 + restart ×%d (dedup on)", n), viaProxy, baseLoad(), func(t *testing.T, e *env) time.Time {
		for i := range n {
			e.fault(t, "broker2")
			e.c.script(t, "kill", "broker2")
			steady(2 * time.Second)
			e.c.script(t, "start1", "broker2")
			if i < n-1 {
				start := time.Now()
				if !waitFor(t.Context(), 3*time.Minute, func() bool { return e.allReceiptedSince(start) }) {
					t.Fatalf("no receipts on every stream within 3 minutes after restart %d:\n%s", i+1, e.failures())
				}
				e.spread(t)
			}
		}
		return time.Now()
	})
}

// TestBrokerFrozenThenThawed: broker 2 is stopped with SIGSTOP for three keep-alive intervals,
// then continued.
func TestBrokerFrozenThenThawed(t *testing.T) {
	scenario(t, fmt.Sprintf("broker SIGSTOP %s then SIGCONT", 3*keepAlive), viaProxy, baseLoad(), func(t *testing.T, e *env) time.Time {
		pid := e.c.pid(t, "broker2")
		e.fault(t, "broker2")
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		steady(3 * keepAlive)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	})
}

// TestBrokerFrozenForGood: broker 2 is stopped with SIGSTOP and never continued; its ZooKeeper
// session expires and broker 1 takes its topics. Recovery is counted from the freeze.
func TestBrokerFrozenForGood(t *testing.T) {
	scenario(t, "broker SIGSTOP for good (topics reassigned)", viaProxy, baseLoad(), func(t *testing.T, e *env) time.Time {
		pid := e.c.pid(t, "broker2")
		t.Cleanup(func() {
			// Back to two brokers for the next scenario.
			e.c.script(t, "kill", "broker2")
			e.c.script(t, "start1", "broker2")
		})
		e.fault(t, "broker2")
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	})
}

// TestUnloads: the namespace's bundles and single topics are unloaded again and again while
// producing and consuming; ownership moves between the brokers.
func TestUnloads(t *testing.T) {
	n := pick(3, 10)
	scenario(t, fmt.Sprintf("namespace + topic unload ×%d", n), viaProxy, baseLoad(), func(t *testing.T, e *env) time.Time {
		for i := range n {
			e.fault(t)
			e.c.mustAdmin(t, http.MethodPut, e.c.Broker1Admin+"/admin/v2/namespaces/chaos/allowed/unload", "")
			steady(time.Second)
			tp := e.topics[i%len(e.topics)]
			e.c.mustAdmin(t, http.MethodPut, e.c.Broker1Admin+"/admin/v2/persistent/"+tp[len("persistent://"):]+"/unload", "")
			steady(time.Second)
		}
		return time.Now()
	})
}

// TestNetworkFaults: the fault proxy between the bridge and the Pulsar proxy.
func TestNetworkFaults(t *testing.T) {
	d := pick(8*time.Second, 30*time.Second)
	for _, tc := range []struct {
		name string
		f    faultproxy.Faults
		dur  time.Duration
	}{
		{fmt.Sprintf("latency 100 ms ± 100 ms for %s", d), faultproxy.Faults{Latency: 100 * time.Millisecond, Jitter: 100 * time.Millisecond}, d},
		{fmt.Sprintf("bandwidth 16 KiB/s for %s", d), faultproxy.Faults{BytesPerSecond: 16 << 10}, d},
		{fmt.Sprintf("black hole for %s", 3*keepAlive), faultproxy.Faults{Blackhole: true}, 3 * keepAlive},
		{fmt.Sprintf("sliced into 3-byte segments for %s", d), faultproxy.Faults{SliceBytes: 3, SliceDelay: 200 * time.Microsecond}, d},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scenario(t, tc.name, viaFault, baseLoad(), func(t *testing.T, e *env) time.Time {
				e.fault(t)
				e.fp.Set(tc.f)
				steady(tc.dur)
				e.fp.Heal()
				return time.Now()
			})
		})
	}
	n := pick(3, 10)
	t.Run("resets", func(t *testing.T) {
		scenario(t, fmt.Sprintf("connection reset ×%d", n), viaFault, baseLoad(), func(t *testing.T, e *env) time.Time {
			for range n {
				e.fault(t)
				if e.fp.Reset() == 0 {
					t.Error("no connection through the fault proxy to reset")
				}
				steady(2 * time.Second)
			}
			return time.Now()
		})
	})
}

// TestBridgeKill9: the bridge itself is killed with SIGKILL mid-stream and started again;
// its clients resume from their first unreceipted record (duplicates counted).
func TestBridgeKill9(t *testing.T) {
	n := pick(1, 5)
	scenario(t, fmt.Sprintf("bridge kill -9 + restart ×%d", n), viaProxy, baseLoad(), func(t *testing.T, e *env) time.Time {
		for i := range n {
			e.fault(t)
			e.b.kill9()
			e.b.start()
			if i < n-1 {
				start := time.Now()
				if !waitFor(t.Context(), 2*time.Minute, func() bool { return e.allReceiptedSince(start) }) {
					t.Fatalf("no receipts on every stream within 2 minutes after bridge restart %d", i+1)
				}
			}
		}
		return time.Now()
	})
}

// TestProxyKill9: the Pulsar proxy in the path is killed with SIGKILL and started again.
func TestProxyKill9(t *testing.T) {
	scenario(t, "Pulsar proxy kill -9 + restart", viaProxy, baseLoad(), func(t *testing.T, e *env) time.Time {
		e.fault(t)
		e.c.script(t, "kill", "proxy")
		steady(2 * time.Second)
		e.c.script(t, "start1", "proxy")
		return time.Now()
	})
}

// TestPerBrokerTLS: the bridge reaches the brokers over TLS, each broker verified under its
// own name (broker 2's certificate names 127.0.0.2 only), while ownership moves between them.
// The service URL is broker 2 (127.0.0.2); topics on broker 1 are verified as 127.0.0.1.
func TestPerBrokerTLS(t *testing.T) {
	scenario(t, "TLS per broker + namespace unload ×2", viaTLS, baseLoad(), func(t *testing.T, e *env) time.Time {
		for i := range 2 {
			if i == 0 {
				e.fault(t, "broker1", "broker2") // verified under each broker's name: both own part of the load
			} else {
				e.fault(t)
			}
			e.c.mustAdmin(t, http.MethodPut, e.c.Broker1Admin+"/admin/v2/namespaces/chaos/allowed/unload", "")
			steady(2 * time.Second)
		}
		return time.Now()
	})
}

// TestManyStreams: 1000 ingress and 100 egress streams (100 and 10 in the short form) while
// the connections to the brokers are reset; resident memory stays under memory.limit and the
// goroutines return to their baseline once the streams end (both checked by scenario).
func TestManyStreams(t *testing.T) {
	ld := load{ingress: pick(100, 1000), egress: pick(10, 100), topics: 4, pace: time.Second}
	scenario(t, "connection reset ×2 under many streams", viaFault, ld, func(t *testing.T, e *env) time.Time {
		for range 2 {
			e.fault(t)
			if e.fp.Reset() == 0 {
				t.Error("no connection through the fault proxy to reset")
			}
			steady(3 * time.Second)
		}
		return time.Now()
	})
}

// TestProxyRestartWithPortTaken: the Pulsar proxy binds its binary port first, then its web
// port, and exits when the web port is taken. A port of the cluster can be taken by any
// client connection: the cluster's ports lie in the kernel's ephemeral range, and connect()
// favours even ports such as the proxy's. cluster.sh start1 proxy used to report the proxy up
// as soon as its binary port accepted a TCP connection, so the proxy died right after and
// stayed dead for every later test. start1 must return only once a lookup through the proxy
// works, starting it again once the port is free.
func TestProxyRestartWithPortTaken(t *testing.T) {
	c := useCluster(t)
	web, err := strconv.Atoi(c.ProxyWebURL[strings.LastIndexByte(c.ProxyWebURL, ':')+1:])
	if err != nil {
		t.Fatalf("proxy web URL %q: %v", c.ProxyWebURL, err)
	}
	c.script(t, "kill", "proxy")
	// Take the web port as connect() does: a client socket on it (no SO_REUSEADDR), here
	// connected to broker 1's admin port. The killed proxy's sockets may hold it for a while.
	var hold *net.TCPConn
	if !waitFor(t.Context(), 90*time.Second, func() bool {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: web}}
		conn, err := d.Dial("tcp", hostPort(c.Broker1Admin))
		if err != nil {
			return false
		}
		hold = conn.(*net.TCPConn)
		return true
	}) {
		t.Fatalf("could not take port %d within 90 s", web)
	}
	done := make(chan struct{})
	var watch sync.WaitGroup
	release := sync.OnceFunc(func() {
		_ = hold.SetLinger(0) // closed with a reset: no TIME-WAIT left on the port
		hold.Close()
	})
	defer func() { close(done); watch.Wait(); release() }()
	// Free the port once a proxy started on it has died (or after three minutes).
	pidFile := filepath.Join(c.StateDir, "proxy", "pid")
	watch.Add(1)
	go func() {
		defer watch.Done()
		defer release()
		deadline := time.After(3 * time.Minute)
		for {
			if b, err := os.ReadFile(pidFile); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && syscall.Kill(pid, 0) == syscall.ESRCH {
					t.Logf("the proxy (pid %d) died with port %d taken; freeing the port", pid, web)
					return
				}
			}
			select {
			case <-done:
				return
			case <-deadline:
				t.Logf("no proxy died within 3 minutes with port %d taken; freeing the port", web)
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	if out, err := run(c.env, c.Script, "start1", "proxy"); err != nil {
		t.Fatalf("cluster.sh start1 proxy: %v\n%s", err, out)
	} else {
		t.Logf("cluster.sh start1 proxy:\n%s", out)
	}
	// start1 said the proxy is up: a client must get through it now. A generous deadline
	// (a minute) so that only a proxy that is not there fails.
	var last error
	if !waitFor(t.Context(), time.Minute, func() bool { last = proxyServes(c, 20*time.Second); return last == nil }) {
		t.Fatalf("cluster.sh start1 proxy returned, yet no lookup works through the proxy for a minute: %v", last)
	}
}

// proxyServes looks a topic up through the Pulsar proxy with the official client and
// attaches a reader on the broker that owns it.
func proxyServes(c *cluster, timeout time.Duration) error {
	cl, err := official.NewClient(official.ClientOptions{URL: c.ProxyURL, ConnectionTimeout: timeout, OperationTimeout: timeout,
		Authentication: official.NewAuthenticationToken(c.SuperuserToken), Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer cl.Close()
	topic := "persistent://chaos/allowed/" + randName("proxy-ready")
	if _, err := cl.TopicPartitions(topic); err != nil {
		return fmt.Errorf("partitioned metadata of %s: %w", topic, err)
	}
	rd, err := cl.CreateReader(official.ReaderOptions{Topic: topic, StartMessageID: official.LatestMessageID()})
	if err != nil {
		return fmt.Errorf("reader on %s: %w", topic, err)
	}
	rd.Close()
	return nil
}
