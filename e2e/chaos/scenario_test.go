package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"

	"github.com/recordio-bridge/bridge/e2e/faultproxy"
)

// keepAlive is the bridge's ping interval in these tests: a broker silent for two is dead.
const keepAlive = 5 * time.Second

// path is how the bridge reaches the brokers.
type path int

const (
	// The service URL of the direct paths is broker 2: broker 1 is a standalone, and a
	// standalone answers lookups with proxy_through_service_url (the Java client logs
	// "Connected through proxy"), which a broker does not honour.
	viaTLS    path = iota // pulsar+ssl:// to broker 2, redirected to broker 1 under its own name
	viaProxy              // pulsar:// to the Pulsar proxy
	viaDirect             // pulsar:// to broker 2, redirected to broker 1
	viaFault              // pulsar:// to the fault proxy, in front of the Pulsar proxy
)

func (p path) String() string {
	return [...]string{viaTLS: "TLS to the brokers", viaProxy: "Pulsar proxy", viaDirect: "two brokers, direct", viaFault: "fault proxy + Pulsar proxy"}[p]
}

type load struct {
	ingress, egress, topics int
	pace                    time.Duration // between records of one ingress stream
}

func (l load) String() string {
	return fmt.Sprintf("%d in + %d out streams, %d topics, %d rec/s", l.ingress, l.egress, l.topics, int(float64(l.ingress)*float64(time.Second)/float64(l.pace)))
}

// env is one scenario's world.
type env struct {
	c      *cluster
	b      *bridge
	fp     *faultproxy.Proxy // viaFault only
	topics []string
	ins    []*ingressClient
}

func randName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func hostPort(url string) string {
	return url[strings.Index(url, "://")+3:]
}

// bridgeConfig is the bridge's configuration for a run on topics through p.
func bridgeConfig(c *cluster, p path, url string, topics []string) string {
	var pulsarCfg string
	switch p {
	case viaTLS:
		pulsarCfg = fmt.Sprintf("  url: %s\n  tls:\n    caFile: %s\n", c.Broker2TLS, c.CAFile)
	default:
		pulsarCfg = fmt.Sprintf("  url: %s\n", url)
	}
	var streams strings.Builder
	for i, t := range topics {
		fmt.Fprintf(&streams, "  - name: e%d\n    topics: [%s]\n    type: shared\n    position: earliest\n", i, t)
	}
	return fmt.Sprintf(`pulsar:
%s  token: file:%s
  keepAlive: %s
  operationTimeout: 15s
  producerIdleTimeout: 5s
ingress:
  publishTimeout: 20s
routes:
  - name: load
    namespaces: [chaos/allowed, chaos/forbidden]
    default:
      topic: "persistent://chaos/allowed/{header:X-Topic}"
      key: "{json:k}"
  - name: forbidden
    namespaces: [chaos/forbidden]
    default:
      topic: "persistent://chaos/forbidden/{header:X-Topic}"
streams:
%s`, pulsarCfg, c.BridgeTokenFile, keepAlive, streams.String())
}

// scenario runs ld through p, calls inject while it runs (inject returns when the fault is
// over, with the moment it healed), then checks with the official client that every
// receipted record is in its topic and that the egress streams delivered everything.
func scenario(t *testing.T, fault string, p path, ld load, inject func(t *testing.T, e *env) time.Time) {
	c := useCluster(t)
	if ld.egress > 0 && ld.egress < ld.topics {
		t.Fatalf("load %v: every topic needs an egress stream", ld)
	}
	run := randName("r")
	e := &env{c: c}
	short := make([]string, ld.topics)
	for i := range ld.topics {
		short[i] = fmt.Sprintf("%s-t%d", run, i)
		e.topics = append(e.topics, "persistent://chaos/allowed/"+short[i])
	}
	e.spread(t)
	url := c.ProxyURL
	if p == viaDirect {
		url = c.Broker2URL
	}
	if p == viaFault {
		fp, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", freePort(t)), hostPort(c.ProxyURL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fp.Close() })
		e.fp = fp
		url = "pulsar://" + fp.Addr()
	}
	e.b = startBridge(t, bridgeConfig(c, p, url, e.topics))
	baseGoroutines := e.b.goroutines()
	var peakRSS atomic.Int64
	sampleDone := make(chan struct{})
	sampleStop := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for {
			if r := e.b.rssBytes(); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			select {
			case <-sampleStop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	stopSampling := sync.OnceFunc(func() { close(sampleStop); <-sampleDone })
	defer stopSampling()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ectx, ecancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { ecancel(); cancel(); wg.Wait() }()
	var outs []*egressClient
	for i := range ld.egress {
		ec := newEgressClient(fmt.Sprintf("%s/v1/streams/e%d", e.b.DataURL, i%ld.topics))
		outs = append(outs, ec)
		wg.Add(1)
		go func() { defer wg.Done(); ec.run(ectx) }()
	}
	stop := make(chan struct{})
	var iwg sync.WaitGroup
	for i := range ld.ingress {
		ic := newIngressClient(e.b.DataURL+"/v1/publish/load", short[i%ld.topics], fmt.Sprintf("%s-s%d", run, i), ld.pace)
		e.ins = append(e.ins, ic)
		iwg.Add(1)
		go func() { defer iwg.Done(); ic.run(ctx, stop) }()
	}
	// Warm up: every stream has had a receipt.
	if !waitFor(ctx, 90*time.Second, func() bool { return e.allReceiptedSince(time.Time{}) }) {
		close(stop)
		t.Fatalf("no receipts on every stream within 90s before the fault:\n%s", e.failures())
	}

	t0 := time.Now()
	healed := inject(t, e)
	var recovered time.Duration
	if waitFor(ctx, 3*time.Minute, func() bool { return e.allReceiptedSince(healed) }) {
		recovered = time.Since(healed)
	} else {
		t.Errorf("%s: not every stream had a receipt within 3 minutes after the fault healed:\n%s", fault, e.failures())
		recovered = -1
	}
	t.Logf("%s: fault lasted %s, recovered %s after it healed", fault, healed.Sub(t0).Round(100*time.Millisecond), recovered.Round(10*time.Millisecond))
	close(stop)
	iwg.Wait()

	// The oracle: what reached the topics.
	receipted := map[string]string{}
	unreceipted := 0
	for _, ic := range e.ins {
		ic.mu.Lock()
		for id, mid := range ic.receipted {
			receipted[id] = mid
		}
		ic.mu.Unlock()
		unreceipted += ic.unreceipted()
	}
	counts, order := readAll(t, c, e.topics)
	r := row{Fault: fault, Load: ld.String() + ", " + p.String(), Receipted: len(receipted)}
	var lostSample []string
	for _, id := range sortedKeys(receipted) {
		if counts[id] == 0 {
			r.Lost++
			if len(lostSample) < 20 {
				lostSample = append(lostSample, id+" (receipt "+receipted[id]+")")
			}
		} else {
			r.Present++
		}
	}
	for _, n := range counts {
		if n > 1 {
			r.Duplicated += n - 1
		}
	}
	// Egress: every record in the topics reaches the egress streams.
	if len(outs) > 0 {
		missing := func() int {
			seen := map[string]bool{}
			for _, ec := range outs {
				ec.mu.Lock()
				for id := range ec.seen {
					seen[id] = true
				}
				ec.mu.Unlock()
			}
			m := 0
			for id := range counts {
				if !seen[id] {
					m++
				}
			}
			return m
		}
		waitFor(ctx, 2*time.Minute, func() bool { return missing() == 0 })
		r.EgressMissing = missing()
	}
	ecancel()
	wg.Wait()
	stopSampling()
	// Every stream is over: the bridge's goroutines return to where they were before the load
	// (producers idle out after 5 s; a little slack for the broker connections).
	// The clients' idle keep-alive connections hold server goroutines: they go first.
	ingressHTTP.CloseIdleConnections()
	var after int
	back := waitFor(ctx, time.Minute, func() bool { after = e.b.goroutines(); return after >= 0 && after <= baseGoroutines+20 })
	if !back {
		t.Errorf("%s: the bridge has %d goroutines a minute after the load ended, %d before it", fault, after, baseGoroutines)
	}
	if pk := peakRSS.Load(); pk > memoryLimit {
		t.Errorf("%s: peak resident memory %d MiB is above memory.limit %d MiB", fault, pk>>20, memoryLimit>>20)
	}
	r.Memory = fmt.Sprintf("%d MiB, %d→%d goroutines", peakRSS.Load()>>20, baseGoroutines, after)
	if recovered >= 0 {
		r.Recovered = recovered.Round(100 * time.Millisecond).String()
	} else {
		r.Recovered = "not recovered"
	}
	var problems []string
	if r.Lost > 0 {
		problems = append(problems, fmt.Sprintf("%d receipted records missing", r.Lost))
		t.Logf("receipted but missing (first 20): %s", strings.Join(lostSample, ", "))
	}
	if unreceipted > 0 {
		problems = append(problems, fmt.Sprintf("%d records never receipted", unreceipted))
	}
	if r.EgressMissing > 0 {
		problems = append(problems, fmt.Sprintf("%d records never reached egress", r.EgressMissing))
	}
	if recovered < 0 {
		problems = append(problems, "no recovery")
	}
	if order > 0 {
		r.Result = fmt.Sprintf("ok, %d out of order", order)
	} else {
		r.Result = "ok"
	}
	if len(problems) > 0 {
		r.Result = "FAIL: " + strings.Join(problems, "; ")
		t.Errorf("%s: %s\ningress failures:\n%s\negress ends:\n%s", fault, r.Result, e.failures(), egressEnds(outs))
	}
	addRow(r)
}

// allReceiptedSince reports whether every ingress stream had a receipt after t.
func (e *env) allReceiptedSince(t time.Time) bool {
	for _, ic := range e.ins {
		last := ic.lastOK.Load()
		if last == 0 || (!t.IsZero() && last <= t.UnixNano()) {
			return false
		}
	}
	return true
}

func (e *env) failures() string {
	all := map[string]int{}
	for _, ic := range e.ins {
		ic.mu.Lock()
		for k, v := range ic.failures {
			all[k] += v
		}
		ic.mu.Unlock()
	}
	var b strings.Builder
	for _, k := range sortedKeys(all) {
		fmt.Fprintf(&b, "  %6d× %s\n", all[k], k)
	}
	return b.String()
}

func egressEnds(outs []*egressClient) string {
	all := map[string]int{}
	for _, ec := range outs {
		ec.mu.Lock()
		for k, v := range ec.errs {
			all[k] += v
		}
		ec.mu.Unlock()
	}
	var b strings.Builder
	for _, k := range sortedKeys(all) {
		fmt.Fprintf(&b, "  %6d× %s\n", all[k], k)
	}
	return b.String()
}

// waitFor polls cond until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// oracle is an official Go client with the superuser token, through the Pulsar proxy (the
// official client sent to broker 1 subscribes there even when broker 2 owns the topic).
func oracle(t testing.TB, c *cluster) official.Client {
	t.Helper()
	cl, err := official.NewClient(official.ClientOptions{URL: c.ProxyURL, OperationTimeout: 60 * time.Second,
		Authentication: official.NewAuthenticationToken(c.SuperuserToken), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// readAll reads every message of topics from the beginning with the official client and
// returns how often each record id is there, and how many records came before a lower
// number of their own key (order broken per key; duplicates ignored).
func readAll(t testing.TB, c *cluster, topics []string) (map[string]int, int) {
	t.Helper()
	cl := oracle(t, c)
	counts := map[string]int{}
	outOfOrder := 0
	for _, topic := range topics {
		var rd official.Reader
		var err error
		// Ownership may be moving (the scenario's unloads, or a broker that was just
		// restarted): the official client does not redo the lookup, so the oracle retries.
		for range 30 {
			rd, err = cl.CreateReader(official.ReaderOptions{Topic: topic, StartMessageID: official.EarliestMessageID()})
			if err == nil || !strings.Contains(err.Error(), "redo the lookup") {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Fatalf("oracle reader on %s: %v", topic, err)
		}
		last := map[string]int{}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for rd.HasNext() {
			m, err := rd.Next(ctx)
			if err != nil {
				cancel()
				rd.Close()
				t.Fatalf("oracle read on %s: %v", topic, err)
			}
			var r record
			if err := json.Unmarshal(m.Payload(), &r); err != nil {
				t.Fatalf("oracle: a message that is not a record on %s: %q", topic, m.Payload())
			}
			counts[r.ID]++
			if counts[r.ID] == 1 {
				if n, ok := last[r.K]; ok && r.N < n {
					outOfOrder++
				}
				last[r.K] = max(last[r.K], r.N)
			}
		}
		cancel()
		rd.Close()
	}
	return counts, outOfOrder
}

// quietLogger keeps the official client's warnings and errors only.
func quietLogger() log.Logger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	return log.NewLoggerWithLogrus(l)
}

// spread places the topics' bundles on both brokers (the first topic's bundle on broker 2,
// the next distinct bundle on broker 1, and so on) by unloading each with a destination
// broker, so a broker fault always hits part of the load; it says so in the log when the
// topics still do not split (all of them in one bundle).
func (e *env) spread(t *testing.T) {
	t.Helper()
	dests := []string{hostPort(e.c.Broker2Admin), hostPort(e.c.Broker1Admin)}
	var order []string
	target := map[string]string{}
	for _, tp := range e.topics {
		b := strings.TrimSpace(string(e.c.mustAdmin(t, http.MethodGet, e.c.Broker1Admin+"/lookup/v2/topic/"+strings.Replace(tp, "://", "/", 1)+"/bundle", "")))
		if _, ok := target[b]; !ok {
			target[b] = dests[len(order)%2]
			order = append(order, b)
		}
	}
	for _, b := range order {
		e.c.mustAdmin(t, http.MethodPut, e.c.Broker1Admin+"/admin/v2/namespaces/chaos/allowed/"+b+"/unload?destinationBroker="+target[b], "")
	}
	on := map[string]int{}
	for _, tp := range e.topics {
		on[e.c.owner(t, tp)]++
	}
	if len(on) < 2 {
		t.Logf("the topics are all on one broker: %v", on)
	}
}
