package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/javapeer"
)

// The multi-replica topology: three bridge processes behind HAProxy on the cluster, named
// (exactly-once) ingress streams and client-acknowledged egress streams through the
// balancer, while replicas are killed, a broker restarts, bundles move and a topic grows.

// replicaTopic is one topic of the mixed load.
type replicaTopic struct {
	short      string // the name after chaos/allowed/
	partitions int    // 0: not partitioned
	keyed      int    // keyed streams ({json:k}, route load)
	keyless    int    // keyless streams (route keyless)
}

func (rt replicaTopic) full() string { return "persistent://chaos/allowed/" + rt.short }

// mixed is one run of the mixed load through the replicas.
type mixed struct {
	c        *cluster
	replicas []*bridge
	lb       *balancer
	topics   []*replicaTopic
	ins      []*ingressClient
	outs     []*ackingEgress
	stop     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	ecancel  context.CancelFunc
	iwg, ewg sync.WaitGroup

	mu     sync.Mutex
	starts []time.Time // each replica's last start
	incarn []int       // each replica's number of starts
	events []event     // the faults, for the table and the plot
	grown  time.Time   // the last partition growth
}

type event struct {
	at   time.Time
	what string
}

// replicaLoad sizes the mixed load.
type replicaLoad struct {
	perTopic int           // ingress streams per topic (half keyed, half keyless on the mixed topics)
	egress   int           // egress clients per topic (one shared subscription each)
	pace     time.Duration // between records of one stream
	pkg      bool          // the clients are the client package's Publisher and Subscriber
}

func (l replicaLoad) String() string {
	s := fmt.Sprintf("3 replicas behind HAProxy, %d named streams (keyed + keyless) on 4 topics (3, 3 and 2→4 partitions, 1 unpartitioned), %d rec/s, %d acking egress clients",
		4*l.perTopic, int(float64(4*l.perTopic)*float64(time.Second)/float64(l.pace)), 4*l.egress)
	if l.pkg {
		s += " (client.Publisher and client.Subscriber)"
	}
	return s
}

// replicaConfig is the bridge's configuration of the replicas: bridgeConfig's, with one
// client-acknowledged shared egress stream per topic.
func replicaConfig(c *cluster, topics []*replicaTopic) string {
	var b strings.Builder
	b.WriteString(bridgeConfig(c, viaProxy, c.ProxyURL, nil))
	for i, rt := range topics {
		fmt.Fprintf(&b, `  - name: e%d
    topics: [%s]
    subscription: replicas
    type: shared
    position: earliest
    ack: client
    envelope: json
    ackTimeout: 20s
    heartbeatInterval: 2s
    heartbeat: '{"type":"HEARTBEAT"}'
    retry:
      initial: 500ms
      max: 5s
`, i, rt.full())
	}
	return b.String()
}

// startMixed creates the topics, starts three replicas and HAProxy and the load.
func startMixed(t *testing.T, ld replicaLoad) *mixed {
	c := useCluster(t)
	run := randName("rep")
	m := &mixed{c: c, stop: make(chan struct{})}
	m.topics = []*replicaTopic{
		{short: run + "-keyed", partitions: 3, keyed: ld.perTopic},
		{short: run + "-keyless", partitions: 3, keyless: ld.perTopic},
		{short: run + "-grows", partitions: 2, keyed: ld.perTopic - ld.perTopic/2, keyless: ld.perTopic / 2},
		{short: run + "-single", keyed: ld.perTopic - ld.perTopic/2, keyless: ld.perTopic / 2},
	}
	for _, rt := range m.topics {
		if rt.partitions > 0 {
			c.mustAdmin(t, http.MethodPut, c.Broker1Admin+"/admin/v2/persistent/chaos/allowed/"+rt.short+"/partitions", strconv.Itoa(rt.partitions))
		}
	}
	// The bundles on both brokers, so the broker restart hits part of the load.
	(&env{c: c, topics: m.partitionNames()}).spread(t)
	cfg := replicaConfig(c, m.topics)
	for range 3 {
		m.replicas = append(m.replicas, startBridge(t, cfg))
		m.starts = append(m.starts, time.Now())
		m.incarn = append(m.incarn, 1)
	}
	m.lb = startBalancer(t, m.replicas)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	ectx, ecancel := context.WithCancel(m.ctx)
	m.ecancel = ecancel
	t.Cleanup(func() { m.stopLoad(); m.ecancel(); m.cancel(); m.ewg.Wait() })
	for i, rt := range m.topics {
		for range ld.egress {
			ec := newAckingEgress(fmt.Sprintf("%s/v1/streams/e%d", m.lb.URL, i), 30*time.Second)
			ec.pkg = ld.pkg
			m.outs = append(m.outs, ec)
			m.ewg.Add(1)
			go func() { defer m.ewg.Done(); ec.run(ectx) }()
		}
		for j := range rt.keyed + rt.keyless {
			route := "load"
			if j >= rt.keyed {
				route = "keyless"
			}
			key := fmt.Sprintf("%s-%s%d", rt.short, route, j)
			ic := newIngressClient(m.lb.URL+"/v1/publish/"+route, rt.short, key, ld.pace)
			ic.stream = key
			ic.perRequest = int(15 * time.Second / ld.pace) // a new request, balanced again, every ~15 s
			ic.pkg = ld.pkg
			m.ins = append(m.ins, ic)
			m.iwg.Add(1)
			go func() { defer m.iwg.Done(); ic.run(m.ctx, m.stop) }()
		}
	}
	e := &env{ins: m.ins}
	if !waitFor(m.ctx, 2*time.Minute, func() bool { return e.allReceiptedSince(time.Time{}) }) {
		t.Fatalf("no receipts on every stream within 2 minutes:\n%s", e.failures())
	}
	return m
}

// partitionNames is every partition of the topics now (a topic's own name when it is not
// partitioned).
func (m *mixed) partitionNames() []string {
	var out []string
	for _, rt := range m.topics {
		if rt.partitions == 0 {
			out = append(out, rt.full())
		}
		for p := range rt.partitions {
			out = append(out, fmt.Sprintf("%s-partition-%d", rt.full(), p))
		}
	}
	return out
}

func (m *mixed) note(what string) {
	m.mu.Lock()
	m.events = append(m.events, event{time.Now(), what})
	m.mu.Unlock()
}

// killReplica kills replica i with SIGKILL, starts it again and waits for HAProxy to send
// it traffic again.
func (m *mixed) killReplica(t *testing.T, i int) {
	m.note(fmt.Sprintf("kill -9 replica r%d", i+1))
	m.replicas[i].kill9()
	m.replicas[i].start()
	m.mu.Lock()
	m.starts[i] = time.Now()
	m.incarn[i]++
	m.mu.Unlock()
	m.lb.waitUp(t, i)
}

// restartBroker kills broker 2 with SIGKILL and starts it again.
func (m *mixed) restartBroker(t *testing.T) {
	e := &env{c: m.c, topics: m.partitionNames()}
	t.Logf("broker 2 owns %d of the %d partitions", len(e.owned(t, "broker2")), len(e.topics))
	m.note("broker 2 kill -9 + restart")
	m.c.script(t, "kill", "broker2")
	time.Sleep(2 * time.Second)
	m.c.script(t, "start1", "broker2")
}

// unload unloads the namespace's bundles (every topic moves).
func (m *mixed) unload(t *testing.T) {
	m.note("namespace unload")
	m.c.mustAdmin(t, http.MethodPut, m.c.Broker1Admin+"/admin/v2/namespaces/chaos/allowed/unload", "")
}

// growPartitions adds two partitions to the growing topic.
func (m *mixed) growPartitions(t *testing.T) {
	rt := m.topics[2]
	m.note(fmt.Sprintf("partitions %d → %d", rt.partitions, rt.partitions+2))
	m.c.mustAdmin(t, http.MethodPost, m.c.Broker1Admin+"/admin/v2/persistent/chaos/allowed/"+rt.short+"/partitions", strconv.Itoa(rt.partitions+2))
	m.mu.Lock()
	rt.partitions += 2
	m.grown = time.Now()
	m.mu.Unlock()
}

// partitionSettle is how long after a partition growth every replica has re-read the
// partition count (the client's PartitionsRefreshInterval, 1 min, and a margin). Inside it
// a named stream that moves to another replica may have its unreceipted records resent
// to another partition than their first copy: no fault that moves streams runs then.
const partitionSettle = 75 * time.Second

func (m *mixed) stopLoad() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.iwg.Wait()
}

// verdict is what the judges found.
type verdict struct {
	receipted, present, lost, duplicated int
	dupAnswers                           int // receipts that said duplicate (resends the broker dropped)
	failed                               int // failed receipts and stalled requests (each followed by a resend)
	order                                int // records out of order in their key (within a partition)
	interleaved                          int // keys whose records interleave across partitions
	unreceipted                          int
	javaCount, goCount                   int
	javaDiff                             int // ids whose count differs between the Java and Go clients
	egressUnacked                        int // records in the topics no egress client had acknowledged
	backlog                              int64
	deliveries                           int
	failures, ackFails                   string
}

func (v verdict) problems() []string {
	var p []string
	if v.lost > 0 {
		p = append(p, fmt.Sprintf("%d receipted records missing", v.lost))
	}
	if v.duplicated > 0 {
		p = append(p, fmt.Sprintf("%d duplicates", v.duplicated))
	}
	if v.unreceipted > 0 {
		p = append(p, fmt.Sprintf("%d records never receipted", v.unreceipted))
	}
	if v.order > 0 {
		p = append(p, fmt.Sprintf("%d records out of order in their key", v.order))
	}
	if v.interleaved > 0 {
		p = append(p, fmt.Sprintf("%d keys interleaved across partitions", v.interleaved))
	}
	if v.javaDiff > 0 {
		p = append(p, fmt.Sprintf("the Java client disagrees on %d records", v.javaDiff))
	}
	if v.egressUnacked > 0 {
		p = append(p, fmt.Sprintf("%d records never acknowledged through egress", v.egressUnacked))
	}
	if v.backlog > 0 {
		p = append(p, fmt.Sprintf("%d messages left in the egress subscriptions", v.backlog))
	}
	return p
}

// finish stops the load, waits until every record is receipted, and judges: with the Go
// client (each partition read in order) and the Java client (each topic, every partition),
// every receipted record is there exactly once, in order per key, and every one of them was
// delivered and acknowledged through egress, leaving no backlog.
func (m *mixed) finish(t *testing.T) verdict {
	m.stopLoad()
	var v verdict
	for _, ic := range m.ins {
		v.unreceipted += ic.unreceipted()
	}
	e := &env{ins: m.ins}
	v.failures = e.failures()
	for _, ic := range m.ins {
		_, f := ic.counts()
		v.failed += f
	}
	receipted := map[string]bool{}
	for _, ic := range m.ins {
		ic.mu.Lock()
		for id := range ic.receipted {
			receipted[id] = true
		}
		v.dupAnswers += ic.dupAnswers
		ic.mu.Unlock()
	}
	v.receipted = len(receipted)

	// The Go client, partition by partition.
	cl := oracle(t, m.c)
	counts := map[string]int{}
	type span struct{ lo, hi int }
	spans := map[string]map[string]*span{} // key -> partition -> first copies' numbers
	perPartition := map[string]int{}
	for _, p := range m.partitionNames() {
		last := map[string]int{}
		readEach(t, cl, p, func(r record) {
			perPartition[p]++
			counts[r.ID]++
			if counts[r.ID] > 1 {
				return
			}
			if n, ok := last[r.K]; ok && r.N < n {
				v.order++
			}
			last[r.K] = max(last[r.K], r.N)
			if spans[r.K] == nil {
				spans[r.K] = map[string]*span{}
			}
			if s := spans[r.K][p]; s == nil {
				spans[r.K][p] = &span{r.N, r.N}
			} else {
				s.lo, s.hi = min(s.lo, r.N), max(s.hi, r.N)
			}
		})
	}
	// A key that moved partition (the topic grew) has its records before the move in one
	// partition and those after it in the other: the partitions' ranges must not overlap.
	for _, byPart := range spans {
		var ss []span
		for _, s := range byPart {
			ss = append(ss, *s)
		}
		slices.SortFunc(ss, func(a, b span) int { return a.lo - b.lo })
		for i := 1; i < len(ss); i++ {
			if ss[i].lo <= ss[i-1].hi {
				v.interleaved++
				break
			}
		}
	}
	for id := range receipted {
		if counts[id] == 0 {
			v.lost++
		} else {
			v.present++
		}
	}
	for _, n := range counts {
		v.goCount += n
		v.duplicated += max(n-1, 0)
	}

	// The Java client, topic by topic (a partitioned topic's every partition).
	javaCounts := map[string]int{}
	for _, rt := range m.topics {
		// The Go client's count for the topic: the Java client stops there, or 10 s after
		// its last message.
		want := 0
		for _, p := range m.partitionNames() {
			if p == rt.full() || strings.HasPrefix(p, rt.full()+"-partition-") {
				want += perPartition[p]
			}
		}
		msgs, _ := javapeer.Consume(t, javapeer.Spec{URL: m.c.ProxyURL, Token: m.c.SuperuserToken, Topic: rt.full(), Count: want + 1,
			Subscription: randName("judge"), Type: "Exclusive", Position: "Earliest", TimeoutMs: 10000, Ack: "none", Payloads: true})
		for _, msg := range msgs {
			var r record
			if err := json.Unmarshal([]byte(msg.Payload), &r); err != nil {
				t.Fatalf("the Java client read a message that is not a record on %s: %q", rt.full(), msg.Payload)
			}
			javaCounts[r.ID]++
			v.javaCount++
		}
	}
	for id, n := range counts {
		if javaCounts[id] != n {
			v.javaDiff++
		}
	}
	for id := range javaCounts {
		if _, ok := counts[id]; !ok {
			v.javaDiff++
		}
	}

	// Egress: every record acknowledged by some client, then nothing left in the
	// subscriptions. A record whose only acknowledgement got no answer (its replica was
	// killed with the request open) is judged by the subscription: the replica either
	// passed it on (the record is gone from the backlog) or not (the broker delivers it
	// again and a client acknowledges it then).
	unacked := func() (missing, unanswered int) {
		for id := range counts {
			ok, sent := false, false
			for _, ec := range m.outs {
				ec.mu.Lock()
				ok = ok || ec.acked[id]
				sent = sent || ec.unanswered[id]
				ec.mu.Unlock()
			}
			switch {
			case ok:
			case sent:
				unanswered++
			default:
				missing++
			}
		}
		return missing, unanswered
	}
	waitFor(t.Context(), 3*time.Minute, func() bool { n, _ := unacked(); return n == 0 })
	waitFor(t.Context(), 2*time.Minute, func() bool { v.backlog = m.backlog(t); return v.backlog == 0 })
	missing, unanswered := unacked()
	v.egressUnacked = missing
	if v.backlog != 0 {
		// Not shown to have reached the broker: count them as never acknowledged.
		v.egressUnacked += unanswered
	} else if unanswered > 0 {
		t.Logf("%d records acknowledged only by a request that got no answer; the subscriptions are empty, so the broker had those acknowledgements", unanswered)
	}
	fails := map[string]int{}
	for _, ec := range m.outs {
		ec.mu.Lock()
		for _, n := range ec.seen {
			v.deliveries += n
		}
		for k, n := range ec.ackFails {
			fails[k] += n
		}
		ec.mu.Unlock()
	}
	v.ackFails = countLines(fails)
	m.ecancel()
	m.ewg.Wait()
	return v
}

// backlog is the messages the egress subscription has not acknowledged, over every topic
// (the broker's msgBacklog and unackedMessages), or -1 when the broker did not say.
func (m *mixed) backlog(t *testing.T) int64 {
	var total int64
	for _, rt := range m.topics {
		u := m.c.Broker1Admin + "/admin/v2/persistent/chaos/allowed/" + rt.short + "/stats"
		if rt.partitions > 0 {
			u = m.c.Broker1Admin + "/admin/v2/persistent/chaos/allowed/" + rt.short + "/partitioned-stats"
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		code, body, err := m.c.admin(ctx, http.MethodGet, u, "")
		cancel()
		if err != nil || code != http.StatusOK {
			return -1
		}
		var st struct {
			Subscriptions map[string]struct {
				MsgBacklog      int64 `json:"msgBacklog"`
				UnackedMessages int64 `json:"unackedMessages"`
			} `json:"subscriptions"`
		}
		if json.Unmarshal(body, &st) != nil {
			return -1
		}
		s, ok := st.Subscriptions["replicas"]
		if !ok {
			return -1
		}
		total += s.MsgBacklog + s.UnackedMessages
	}
	return total
}

// row is the verdict as a line of the results table.
func (v verdict) row(fault string, ld replicaLoad, inFlight int) row {
	r := row{Fault: fault, Load: ld.String(), Receipted: v.receipted, Present: v.present, Lost: v.lost,
		Duplicated: v.duplicated, InFlight: inFlight, EgressMissing: v.egressUnacked,
		Disturbance: fmt.Sprintf("%d failed receipts, %d resends answered duplicate; %d egress deliveries of %d records; Java client read %d, Go client %d",
			v.failed, v.dupAnswers, v.deliveries, v.present, v.javaCount, v.goCount),
		Recovered: "-", Memory: "-", Result: "ok"}
	if p := v.problems(); len(p) > 0 {
		r.Result = "FAIL: " + strings.Join(p, "; ")
	}
	return r
}

// TestReplicasBehindHAProxy: named streams and acking egress clients through HAProxy in
// front of three replicas, while each replica is killed with SIGKILL (and started again),
// broker 2 is killed and restarted, the namespace's bundles are unloaded and one topic
// grows from 2 to 4 partitions. Nothing receipted is lost, nothing is stored twice, order
// per key holds, the Go and Java clients agree, and every message was acknowledged through
// egress. It runs in the short form too.
func TestReplicasBehindHAProxy(t *testing.T) {
	ld := replicaLoad{perTopic: pick(2, 3), egress: 2, pace: pick(100*time.Millisecond, 50*time.Millisecond)}
	runReplicaScenario(t, ld, "3 replicas: kill -9 each + broker restart + unload ×2 + partitions 2 → 4", func(m *mixed, gap time.Duration) []func() {
		return []func(){
			func() { m.killReplica(t, 0) },
			func() { m.unload(t) },
			func() { m.killReplica(t, 1) },
			func() { m.restartBroker(t) },
			func() { m.growPartitions(t); time.Sleep(partitionSettle - gap) },
			func() { m.killReplica(t, 2) },
			func() { m.unload(t) },
		}
	})
}

// runReplicaScenario runs a replica scenario: the topology started with ld, the steps
// taken one a gap apart (the gap is the scenario's to use, as a step that must wait
// longer does), then the verdict, its table row (a failed run's too: "FAIL (see the
// test log)" when it ends early), its figures in the log and its problems reported.
func runReplicaScenario(t *testing.T, ld replicaLoad, fault string, steps func(m *mixed, gap time.Duration) []func()) {
	m := startMixed(t, ld)
	added := false
	defer func() {
		if !added {
			addRow(row{Fault: fault, Load: ld.String(), Result: "FAIL (see the test log)"})
		}
	}()
	for _, ic := range m.ins {
		ic.peakSince()
	}
	gap := pick(10*time.Second, 20*time.Second)
	for _, step := range steps(m, gap) {
		time.Sleep(gap)
		step()
		t.Logf("%s", m.events[len(m.events)-1].what)
	}
	time.Sleep(gap)
	inFlight := 0
	for _, ic := range m.ins {
		inFlight += ic.peakSince()
	}
	v := m.finish(t)
	r := v.row(fault, ld, inFlight)
	added = true
	addRow(r)
	t.Logf("failed receipts and retries:\n%s", v.failures)
	t.Logf("egress acknowledgement failures:\n%s", v.ackFails)
	t.Logf("lost %d, duplicated %d, receipted %d, duplicate answers %d, egress deliveries %d, Java %d / Go %d", v.lost, v.duplicated, v.receipted, v.dupAnswers, v.deliveries, v.javaCount, v.goCount)
	if p := v.problems(); len(p) > 0 {
		t.Errorf("%s\ningress failures:\n%s\negress acknowledgement failures:\n%s", strings.Join(p, "; "), v.failures, v.ackFails)
	}
}
