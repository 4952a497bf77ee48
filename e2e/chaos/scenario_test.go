package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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
	outs   []*egressClient

	// What inject's calls to fault counted: the faults injected, and the records in flight
	// at them (the most sent and not yet receipted at once, from each fault until the next
	// or until recovery, summed).
	faults     int
	inFlight   int
	windowOpen bool
	first      time.Time // the first fault, and the counts just before it
	before     tally
	aborted    string // why the scenario stopped before its oracle, for the table
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
  - name: keyless
    namespaces: [chaos/allowed]
    default:
      topic: "persistent://chaos/allowed/{header:X-Topic}"
  - name: forbidden
    namespaces: [chaos/forbidden]
    default:
      topic: "persistent://chaos/forbidden/{header:X-Topic}"
streams:
%s`, pulsarCfg, c.BridgeTokenFile, keepAlive, streams.String())
}

// baseline is how long the load runs between its warm-up and the fault: what the receipts
// looked like then is what the fault must have disturbed.
const baseline = 3 * time.Second

// scenario runs ld through p, calls inject while it runs (inject calls e.fault right before
// each injection, and returns when the fault is over, with the moment it healed), then
// checks with the official client that every receipted record is in its topic once, in
// order per key, with no more duplicates than records were in flight at the faults, that
// the egress streams delivered everything, and that the fault disturbed the load at all.
func scenario(t *testing.T, fault string, p path, ld load, inject func(t *testing.T, e *env) time.Time) {
	c := useCluster(t)
	if ld.egress > 0 && ld.egress < ld.topics {
		t.Fatalf("load %v: every topic needs an egress stream", ld)
	}
	r := row{Fault: fault, Load: ld.String() + ", " + p.String()}
	e := &env{c: c}
	added := false
	defer func() {
		if !added { // a Fatal on the way: the table still says so
			r.Result = "FAIL (see the test log)"
			if e.aborted != "" {
				r.Result = "FAIL: " + e.aborted
			}
			addRow(r)
		}
	}()
	run := randName("r")
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
		e.outs = outs
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
	warm := time.Now()
	steady(baseline)

	t0 := time.Now()
	healed := inject(t, e)
	if e.faults > 0 {
		t0 = e.first // the disturbance counts from the first fault, after its placement checks
	} else {
		e.before = e.disturbanceCounts()
	}
	var recovered time.Duration
	if waitFor(ctx, 3*time.Minute, func() bool { return e.allReceiptedSince(healed) }) {
		recovered = time.Since(healed)
	} else {
		t.Errorf("%s: not every stream had a receipt within 3 minutes after the fault healed:\n%s", fault, e.failures())
		recovered = -1
	}
	over := time.Now()
	e.closeWindow()
	after := e.disturbanceCounts()
	t.Logf("%s: fault lasted %s, recovered %s after it healed", fault, healed.Sub(t0).Round(100*time.Millisecond), recovered.Round(10*time.Millisecond))
	close(stop)
	iwg.Wait()
	dist := e.disturbance(e.before, after, warm, t0, over)
	r.Disturbance = dist.String()
	r.InFlight = e.inFlight

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
	r.Receipted = len(receipted)
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
	var afterGoroutines int
	back := waitFor(ctx, time.Minute, func() bool {
		afterGoroutines = e.b.goroutines()
		return afterGoroutines >= 0 && afterGoroutines <= baseGoroutines+20
	})
	if !back {
		t.Errorf("%s: the bridge has %d goroutines a minute after the load ended, %d before it", fault, afterGoroutines, baseGoroutines)
	}
	if pk := peakRSS.Load(); pk > memoryLimit {
		t.Errorf("%s: peak resident memory %d MiB is above memory.limit %d MiB", fault, pk>>20, memoryLimit>>20)
	}
	r.Memory = fmt.Sprintf("%d MiB, %d→%d goroutines", peakRSS.Load()>>20, baseGoroutines, afterGoroutines)
	if recovered >= 0 {
		r.Recovered = recovered.Round(100 * time.Millisecond).String()
	} else {
		r.Recovered = "not recovered"
	}
	var problems []string
	if e.faults == 0 {
		problems = append(problems, "no fault injected (inject never called env.fault)")
	}
	if r.Lost > 0 {
		problems = append(problems, fmt.Sprintf("%d receipted records missing", r.Lost))
		t.Logf("receipted but missing (first 20): %s", strings.Join(lostSample, ", "))
	}
	if unreceipted > 0 {
		problems = append(problems, fmt.Sprintf("%d records never receipted", unreceipted))
	}
	if order > 0 {
		problems = append(problems, fmt.Sprintf("%d records out of order in their key", order))
	}
	if r.Duplicated > r.InFlight {
		problems = append(problems, fmt.Sprintf("%d duplicates, more than the %d records in flight at the faults", r.Duplicated, r.InFlight))
	}
	if r.EgressMissing > 0 {
		problems = append(problems, fmt.Sprintf("%d records never reached egress", r.EgressMissing))
	}
	if recovered < 0 {
		problems = append(problems, "no recovery")
	}
	if !dist.any() {
		problems = append(problems, "fault had no effect")
	}
	r.Result = "ok"
	if len(problems) > 0 {
		r.Result = "FAIL: " + strings.Join(problems, "; ")
		t.Errorf("%s: %s\ndisturbance: %s\ningress failures:\n%s\negress ends:\n%s", fault, r.Result, r.Disturbance, e.failures(), egressEnds(outs))
	}
	added = true
	addRow(r)
}

// fault is called by a scenario's inject right before each injection. A fault aimed at a
// broker (targets broker1, broker2) proves nothing unless that broker owns part of the load
// at that moment: when it owns none of the topics, the bundles are placed again (twice at
// most), then the test fails. From here until the next fault, or until the load has
// recovered, the records in flight are counted: they bound the duplicates.
func (e *env) fault(t *testing.T, targets ...string) {
	t.Helper()
	for _, target := range targets {
		for try := 0; ; try++ {
			mine := e.owned(t, target)
			if len(mine) > 0 {
				t.Logf("fault %d: %s owns %d of the %d topics", e.faults+1, target, len(mine), len(e.topics))
				break
			}
			if try == 2 {
				e.aborted = fmt.Sprintf("%s owns none of the topics at the fault", target)
				t.Fatalf("%s owns none of the %d topics right before the fault, after placing the bundles again twice: the fault would hit nothing of the load", target, len(e.topics))
			}
			t.Logf("%s owns none of the topics right before the fault: placing the bundles again", target)
			e.spread(t)
		}
	}
	e.closeWindow()
	e.windowOpen = true
	if e.faults == 0 {
		e.before, e.first = e.disturbanceCounts(), time.Now()
	}
	e.faults++
}

// closeWindow adds the records in flight since the last fault to the bound, and starts
// counting them again from those in flight now.
func (e *env) closeWindow() {
	for _, ic := range e.ins {
		if p := ic.peakSince(); e.windowOpen {
			e.inFlight += p
		}
	}
	e.windowOpen = false
}

// owned is the topics the cluster member name (broker1, broker2) owns now.
func (e *env) owned(t testing.TB, name string) []string {
	t.Helper()
	var addr string
	switch name {
	case "broker1":
		addr = hostPort(e.c.Broker1URL)
	case "broker2":
		addr = hostPort(e.c.Broker2URL)
	default:
		t.Fatalf("no broker %q", name)
	}
	var mine []string
	for _, tp := range e.topics {
		if hostPort(e.c.owner(t, tp)) == addr {
			mine = append(mine, tp)
		}
	}
	return mine
}

// tally is the running totals a fault can move.
type tally struct {
	reconnects                int64 // the bridge's, -1 when it did not answer
	requests, failed, egressE int
	proxy                     faultproxy.Stats // the fault proxy's (viaFault only)
}

func (e *env) disturbanceCounts() tally {
	k := tally{reconnects: -1}
	if e.b != nil {
		k.reconnects = e.b.reconnects()
	}
	if e.fp != nil {
		k.proxy = e.fp.Stats()
	}
	for _, ic := range e.ins {
		rq, f := ic.counts()
		k.requests += rq
		k.failed += f
	}
	for _, ec := range e.outs {
		k.egressE += ec.ends()
	}
	return k
}

// disturbance is what a fault did to the load, from its injection until the load recovered,
// against the baseline just before.
//
// The baseline's figures are robust to the machine's own stalls: on a busy machine (the
// suite shares its cores with other builds) a second in which nothing ran inflates the
// baseline's tail and its longest gap, and a judge against those would call a real fault
// no effect. So the baseline's spread is its median absolute deviation and its usual quiet
// the 99th percentile of the gaps between receipts, which a stall or two barely move.
type disturbance struct {
	reconnects int64 // the bridge's to the brokers
	failed     int   // failed receipts and stalled requests
	broken     int   // ingress requests that ended and were made again
	egressEnds int   // egress streams that ended and were opened again
	// Receipt latency (send to receipt) of the records sent before and during the fault;
	// baseSpread is the baseline's median absolute deviation, scaled to a standard
	// deviation (×1.4826).
	baseMedian, baseP90, baseSpread, faultMedian time.Duration
	// The longest time a stream went without a receipt, before and during the fault, and
	// the 99th percentile of the baseline's gaps between a stream's receipts.
	baseStall, faultStall, baseGap time.Duration
	// What the fault proxy did to the bridge's traffic during the fault: chunks it delayed,
	// throttled, sliced or held, and for how long in all (viaFault only).
	proxied   int64
	proxyHeld time.Duration
}

// proxyActed is the least number of chunks the fault proxy must have acted on for its
// fault to count as one on the load: the load's records cross it by the hundred a
// second, while a fault on a proxy the bridge's traffic bypassed meets a few keep-alives.
const proxyActed = 20

// delayed: the typical record sent during the fault waited for its receipt more than twice
// as long as the typical record before it, and beyond the baseline's usual spread (three
// of its standard deviations, estimated robustly, above its median).
func (d disturbance) delayed() bool {
	return d.faultMedian > 2*d.baseMedian && d.faultMedian > d.baseMedian+3*d.baseSpread
}

// stalled: some stream went without a receipt during the fault for longer than the whole
// baseline, and four times as long as streams usually went between receipts before it.
func (d disturbance) stalled() bool {
	return d.faultStall > baseline && d.faultStall > 4*d.baseGap
}

// acted: the fault proxy acted on the bridge's traffic (delayed, throttled, sliced or
// held it), which the machine's load cannot fake or hide.
func (d disturbance) acted() bool { return d.proxied >= proxyActed }

func (d disturbance) any() bool {
	return d.reconnects > 0 || d.failed > 0 || d.broken > 0 || d.egressEnds > 0 || d.delayed() || d.stalled() || d.acted()
}

func (d disturbance) String() string {
	var parts []string
	for _, f := range []struct {
		n    int64
		what string
	}{{d.reconnects, "reconnects"}, {int64(d.failed), "failed receipts"}, {int64(d.broken), "broken requests"}, {int64(d.egressEnds), "egress ends"}} {
		if f.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", f.n, f.what))
		}
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	lat := fmt.Sprintf("receipt median %s→%s", ms(d.baseMedian), ms(d.faultMedian))
	if d.delayed() {
		lat += " (delayed)"
	}
	stall := fmt.Sprintf("longest stall %s→%s", ms(d.baseStall), ms(d.faultStall))
	if d.stalled() {
		stall += " (stalled)"
	}
	parts = append(parts, lat, stall)
	if d.proxied > 0 {
		parts = append(parts, fmt.Sprintf("fault proxy acted on %d chunks, held %s in all", d.proxied, d.proxyHeld.Round(100*time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// disturbance compares the counts and receipts of the fault [t0, over) with the baseline [warm, t0).
func (e *env) disturbance(before, after tally, warm, t0, over time.Time) disturbance {
	d := disturbance{failed: after.failed - before.failed, broken: after.requests - before.requests, egressEnds: after.egressE - before.egressE,
		proxied: after.proxy.Faulted - before.proxy.Faulted, proxyHeld: after.proxy.Held - before.proxy.Held}
	switch {
	case after.reconnects < 0 || before.reconnects < 0:
	case after.reconnects < before.reconnects: // a new bridge process counts from 0
		d.reconnects = after.reconnects
	default:
		d.reconnects = after.reconnects - before.reconnects
	}
	var baseLat, faultLat, baseGaps []time.Duration
	for _, ic := range e.ins {
		ic.mu.Lock()
		rs := slices.Clone(ic.receipts)
		ic.mu.Unlock()
		for _, x := range rs {
			switch {
			case x.sent >= warm.UnixNano() && x.sent < t0.UnixNano():
				baseLat = append(baseLat, time.Duration(x.got-x.sent))
			case x.sent >= t0.UnixNano() && x.sent < over.UnixNano():
				faultLat = append(faultLat, time.Duration(x.got-x.sent))
			}
		}
		baseGaps = append(baseGaps, gaps(rs, warm, t0)...)
		d.baseStall = max(d.baseStall, longestGap(rs, warm, t0))
		d.faultStall = max(d.faultStall, longestGap(rs, t0, over))
	}
	d.baseMedian, d.baseP90 = quantile(baseLat, 0.5), quantile(baseLat, 0.9)
	dev := make([]time.Duration, len(baseLat))
	for i, l := range baseLat {
		dev[i] = max(l-d.baseMedian, d.baseMedian-l)
	}
	d.baseSpread = time.Duration(1.4826 * float64(quantile(dev, 0.5)))
	d.baseGap = quantile(baseGaps, 0.99)
	d.faultMedian = quantile(faultLat, 0.5)
	return d
}

// gaps is the times between consecutive receipts in [from, to), the first counted from from.
func gaps(rs []receiptTimes, from, to time.Time) []time.Duration {
	got := make([]int64, 0, len(rs))
	for _, x := range rs {
		if x.got >= from.UnixNano() && x.got < to.UnixNano() {
			got = append(got, x.got)
		}
	}
	slices.Sort(got)
	out := make([]time.Duration, 0, len(got))
	prev := from.UnixNano()
	for _, g := range got {
		out = append(out, time.Duration(g-prev))
		prev = g
	}
	return out
}

// longestGap is the longest time in [from, to) without a receipt.
func longestGap(rs []receiptTimes, from, to time.Time) time.Duration {
	got := make([]int64, 0, len(rs))
	for _, x := range rs {
		if x.got >= from.UnixNano() && x.got < to.UnixNano() {
			got = append(got, x.got)
		}
	}
	slices.Sort(got)
	prev, gap := from.UnixNano(), int64(0)
	for _, g := range append(got, to.UnixNano()) {
		gap = max(gap, g-prev)
		prev = g
	}
	return time.Duration(gap)
}

// quantile is the q-quantile of ds (0 when empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// allReceiptedSince reports whether every ingress stream had a receipt for a record it sent
// after t. Receipts of records sent before t do not count: after a fault that lasts for good
// (a broker frozen and never continued), receipts the broker wrote just before it froze
// still arrive, and counting them would end the fault's window before the fault did anything.
func (e *env) allReceiptedSince(t time.Time) bool {
	for _, ic := range e.ins {
		last := ic.sentOK.Load()
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
	return countLines(all)
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
	return countLines(all)
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
		last := map[string]int{}
		readEach(t, cl, topic, func(r record) {
			counts[r.ID]++
			if counts[r.ID] == 1 {
				if n, ok := last[r.K]; ok && r.N < n {
					outOfOrder++
				}
				last[r.K] = max(last[r.K], r.N)
			}
		})
	}
	return counts, outOfOrder
}

// readEach reads every record of one non-partitioned topic (or one partition) from the
// beginning with the official client cl, in order.
func readEach(t testing.TB, cl official.Client, topic string, fn func(record)) {
	t.Helper()
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
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for rd.HasNext() {
		m, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("oracle read on %s: %v", topic, err)
		}
		var r record
		if err := json.Unmarshal(m.Payload(), &r); err != nil {
			t.Fatalf("oracle: a message that is not a record on %s: %q", topic, m.Payload())
		}
		fn(r)
	}
}

// quietLogger keeps the official client's warnings and errors only.
func quietLogger() log.Logger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	return log.NewLoggerWithLogrus(l)
}

// spread places the topics' bundles on both brokers (the first topic's bundle on broker 2,
// the next distinct bundle on broker 1, and so on) by unloading each with a destination
// broker, so a broker fault hits part of the load; when the topics still do not split it
// tries again, twice, then says so in the log (a fault aimed at a broker checks, with
// env.fault, that the broker owns part of the load right before it strikes).
func (e *env) spread(t *testing.T) {
	t.Helper()
	dests := []string{hostPort(e.c.Broker2Admin), hostPort(e.c.Broker1Admin)}
	var on map[string]int
	for range 3 {
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
		on = map[string]int{}
		for _, tp := range e.topics {
			on[e.c.owner(t, tp)]++
		}
		if len(on) >= 2 {
			return
		}
	}
	t.Logf("the topics are all on one broker: %v", on)
}
