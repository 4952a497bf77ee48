// Command tracing measures what tracing costs ingress: the same 1 KiB records POSTed
// through the bridge binary with tracing off and with 1 %, 10 % and 100 % of the records
// sampled (parentbased_traceidratio; each record is sampled on its own; spans exported
// over OTLP/HTTP, or gRPC with -protocol grpc, to a sink in this process that accepts and
// drops them). Two shapes: one stream at a time (a scheduler's sidecar) and eight at once.
//
// With -alt-bins, each sampling rate also runs on other bridge binaries (an A/B of a
// change, or against an older build), paired cycle by cycle with the same untraced
// bridge. With -aa (the default), a
// second bridge with tracing off ("off again") is measured as the traced ones are: its
// cost is the benchmark's noise floor, what a cost must exceed to be a result (-ratios ""
// measures that alone).
//
// How (docs/performance.md, "Method", says why each choice):
//
//   - Every mode has its own bridge, started once and kept running (a sidecar's bridge
//     runs for days), each on a topic of its own. A cycle gives each bridge one slice, in
//     a random order (seeded by -seed: the same orders in every run with the same seed); -rounds paced cycles, then
//     -sat-rounds saturated ones, per shape; one cycle first, not counted.
//   - A slice is a lead (untimed: a quarter of the slice, at least -bsp-delay's worth,
//     so the bridge is busy and its exporter's timer going), then the window: -records
//     records (-sat-records saturated). The bridge's CPU over the window is read from its
//     CPU-time clock in nanoseconds (harness.ProcCPU: all threads, exited ones too), not
//     from /proc's 10 ms ticks; only the bridge's: the broker (1-2x the bridge's CPU per
//     record) and this process (load generator and sink) share the cores and are noise.
//   - Paced slices (the headline: bridge CPU per record): -rate records per second
//     offered in all, each stream open at once its share, in 5 ms steps, catching up if
//     the bridge was slow to read. At a fixed rate below saturation every mode does the
//     same work: the same records in the same bursts, so the producer's batches and the
//     bridge's wake-ups are alike and the difference is tracing's. At saturation tracing
//     also changes timing, so batching, so the CPU per record of everything else, in
//     either direction. The rate must be one every mode keeps up with (the windows that
//     took more than 3 % and 50 ms longer than the rate's are counted and flagged; a
//     verdict needs an interval of 95 %, 6 cycles or more). A record costs more CPU at a lower
//     rate (smaller batches, more wake-ups), so the percentage depends on the rate: the
//     CPU added per record in µs is printed, and also divided by the untraced bridge's
//     CPU per record at saturation (its cheapest), the conservative percentage.
//   - Saturated slices: as fast as the bridge takes them; their throughput against the
//     untraced bridge's in the same cycle is the throughput cost (and the CPU per record
//     at saturation, for information).
//   - The traced bridges' OTEL_BSP_SCHEDULE_DELAY is -bsp-delay (200 ms, default 5 s):
//     with the default, at 1 % a slice's spans would wait up to 5 s, after its window,
//     to be exported, and that CPU would fall outside every window. A batch not full goes
//     out more often, which if anything costs the traced bridges more.
//   - Each cost is a traced bridge's window against the untraced bridge's in the same
//     cycle; over the cycles, the median with a distribution-free confidence interval
//     (the sign test's, 95 % or more from 6 cycles on) and the range. The machine's noise
//     comes in bursts (another process's build, the broker's GC), which a median and
//     many short pairs ride out better than a mean over a few long runs. A cost is a
//     result only when its interval excludes 0; it meets (or fails) its target only when
//     the whole interval is below (or above) it; otherwise it is reported as noise.
//   - After the cycles, the traced bridges' spans ended but never exported (dropped: the
//     queue full, or failed) are counted: a mode that drops spans is cheaper than it is.
//
// The quiet machine's command (what make bench-tracing runs: one shape per broker, as a
// standalone's bookie refuses writes once its disk is 95 % full and both shapes' slices
// write ~35 GB; about 4 minutes a shape; from the bench directory, with a broker at the
// URL and the bridge built by make build):
//
//	go run ./tracing -url pulsar://127.0.0.1:6650 -bin ../bin/bridge -parallel 1 -rounds 20 -sat-rounds 10
//	(and again with -parallel 8, on a fresh broker)
//
// and a short check on a busy machine: -rounds 6 -sat-rounds 3 -records 20000
// -sat-records 10000 -parallel 1.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	url := harness.BrokerFlag()
	bin := harness.BinFlag()
	rounds := flag.Int("rounds", 25, "paced cycles: a slice of -records records for each mode's bridge in each, in a random order")
	satRounds := flag.Int("sat-rounds", 15, "saturated cycles, after the paced ones (0: none)")
	bspDelay := flag.Duration("bsp-delay", 200*time.Millisecond, "the traced bridges' OTEL_BSP_SCHEDULE_DELAY (the SDK's default 5 s): a slice's spans are exported within this, so within its window")
	per := flag.Int("records", 40000, "records of a paced slice, shared by the streams open at once (one stream each)")
	size := flag.Int("size", 1024, "record size")
	shapes := flag.String("parallel", "1,8", "streams open at once: the cycles run once per value")
	rate := flag.Int("rate", 40000, "records per second offered in all in the paced slices, below the slowest mode's saturation (0: as fast as the bridge takes them, the paced slices saturate too)")
	satRecords := flag.Int("sat-records", 20000, "records of a saturated slice")
	protocol := flag.String("protocol", "http/protobuf", "OTLP protocol: http/protobuf or grpc (the sink shares the machine; receiving gRPC costs it ~3x more CPU)")
	profile := flag.String("profile", "", "a directory: in the last paced cycle, write each bridge's CPU profile and allocations (pprof) for -profile-seconds from the start of its slice (the profiles' cost is in that cycle's figures)")
	profileSeconds := flag.Int("profile-seconds", 2, "how long the -profile profiles last")
	ratios := flag.String("ratios", "0.01,0.1,1", "the sampling ratios measured, each a mode (empty, with -aa: only the noise floor)")
	seed := flag.Uint64("seed", 1, "the seed of the slices' random orders (runs with the same seed use the same orders; another seed shows whether an order favours a mode)")
	altBins := flag.String("alt-bins", "", "more bridge binaries (comma-separated) whose traced modes run in the same cycles, each mode named by its file (A/B of a change, paired cycle by cycle)")
	aa := flag.Bool("aa", true, "also run \"off again\", a second bridge with tracing off, measured as a traced one: its cost is the noise floor")
	flag.Parse()
	harness.Pprof = *profile != ""
	harness.RequireBroker(*url, "bench-tracing")
	if *rounds < 1 || *per < 1 || *rate < 0 || *satRecords < 1 || *satRounds < 0 {
		log.Fatal("-rounds, -records and -sat-records must be positive, -rate and -sat-rounds not negative")
	}
	// The OTLP sinks, over HTTP and gRPC: they count export requests and their bytes and
	// decode nothing, as cheap as a collector can be.
	var exports, exportBytes atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		exports.Add(1)
		exportBytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(200)
	}))
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		var req []byte
		if err := st.RecvMsg(&req); err != nil {
			return err
		}
		exports.Add(1)
		exportBytes.Add(int64(len(req)))
		resp := []byte{} // an empty ExportTraceServiceResponse
		return st.SendMsg(&resp)
	}))
	go gs.Serve(gln)
	sink := "http://" + ln.Addr().String()
	if *protocol == "grpc" {
		sink = "http://" + gln.Addr().String()
	} else if *protocol != "http/protobuf" {
		log.Fatalf("-protocol %q: grpc or http/protobuf", *protocol)
	}
	// The modes measured against tracing off, with the targets for the bridge's
	// CPU per record and the throughput.
	var traced []mode
	if *aa {
		traced = append(traced, mode{name: "off again"})
	}
	for _, ratio := range strings.Split(*ratios, ",") {
		if ratio = strings.TrimSpace(ratio); ratio == "" {
			continue
		}
		pct, err := strconv.ParseFloat(ratio, 64)
		if err != nil || pct <= 0 || pct > 1 {
			log.Fatalf("-ratios %q: want sampling ratios in (0, 1]", *ratios)
		}
		target := map[float64]float64{0.01: 2, 0.1: 10}[pct] // 100 %: measured, no target
		env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink, "OTEL_EXPORTER_OTLP_PROTOCOL=" + *protocol,
			"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=" + ratio,
			fmt.Sprintf("OTEL_BSP_SCHEDULE_DELAY=%d", bspDelay.Milliseconds())}
		traced = append(traced, mode{name: fmt.Sprintf("%g %%", pct*100), env: env, target: target})
		for _, alt := range strings.Split(*altBins, ",") {
			if alt = strings.TrimSpace(alt); alt != "" {
				traced = append(traced, mode{name: fmt.Sprintf("%g %% %s", pct*100, filepath.Base(alt)), env: env, target: target, bin: alt})
			}
		}
	}
	off := mode{name: "off"}
	base := fmt.Sprintf("pulsar:\n  url: %s\nroutes:\n  - name: bench\n    namespaces: [public/default]\n    default: {topic: \"{header:X-Topic}\"}\n", *url)
	// The broker's process, when with-broker.sh or pulsar.sh started it: its CPU is printed
	// per slice (not in the tables).
	brokerPID := 0
	if b, err := os.ReadFile(filepath.Join(os.Getenv("PULSAR_STATE_DIR"), "pid")); err == nil {
		brokerPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	brokerCPU := func() time.Duration {
		if brokerPID > 0 {
			return harness.ProcCPU(brokerPID)
		}
		return 0
	}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	record := recordio.AppendRecord(nil, payload)
	// Every mode's bridge runs for the whole benchmark, each on a topic of its own.
	all := append([]mode{off}, traced...)
	bridges := make([]*bridge, len(all))
	for i, m := range all {
		cfg := base
		binary := *bin
		if m.bin != "" {
			binary = m.bin
		}
		br := harness.MustStartBridge(binary, cfg, m.env...)
		defer br.Stop()
		bridges[i] = &bridge{mode: m, br: br, topic: fmt.Sprintf("bench-tracing-%d-%d", i, time.Now().UnixNano())}
		// The topic created, the producer connected.
		post(br.DataURL, bridges[i].topic, &stream{record: record, n: 1}, m.name)
	}
	rng := rand.New(rand.NewPCG(*seed, 2)) // the slices' orders: the same in every run with the same -seed
	progress := func(parallel int, what string, c int, name string, w window) {
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(w.records) }
		fmt.Fprintf(os.Stderr, "p%d %s %d %-10s %6.0f records/s: bridge %.3f µs/record (broker %.2f over the slice)\n", parallel, what, c, name, w.perSec(), us(w.cpu), us(w.broker))
	}
	start := time.Now()
	for _, f := range strings.Split(*shapes, ",") {
		parallel, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || parallel < 1 {
			log.Fatalf("-parallel %q: want a list of positive integers", *shapes)
		}
		// A slice posts one stream per stream open at once, each an equal share of the
		// records and of the rate.
		nPaced := (*per + parallel - 1) / parallel * parallel
		nSat := (*satRecords + parallel - 1) / parallel * parallel
		slice := func(b *bridge, what string, n int, rate float64) {
			var wg sync.WaitGroup
			for s := range parallel {
				wg.Go(func() {
					post(b.br.DataURL, b.topic, &stream{record: record, n: n / parallel, rate: rate / float64(parallel)}, fmt.Sprintf("%s %s stream %d", b.name, what, s))
				})
			}
			wg.Wait()
		}
		// cycles runs n cycles (and one before them, not counted) of a slice of each bridge
		// in a random order, and returns each bridge's windows, one a cycle.
		cycles := func(what string, n, records, lead int, rate float64) map[string][]window {
			got := map[string][]window{}
			var ended0 []int64
			for c := -1; c < n; c++ {
				if c == 0 {
					for _, b := range bridges {
						e, _, _ := spanCounts(b.br.OpsURL, false) // in the uncounted windows
						ended0 = append(ended0, e)
					}
				}
				for _, i := range rng.Perm(len(bridges)) {
					b := bridges[i]
					var profiles sync.WaitGroup
					if *profile != "" && what == "paced" && c == n-1 {
						name := strings.ReplaceAll(strings.ReplaceAll(b.name, " ", ""), "%", "") + fmt.Sprintf("-p%d-", parallel) + "%s.pprof"
						for _, kind := range []string{"profile", "allocs"} {
							profiles.Go(func() {
								harness.FetchProfile(b.br.OpsURL, kind, *profileSeconds, filepath.Join(*profile, fmt.Sprintf(name, kind)))
							})
						}
					}
					w := b.slice(records, brokerCPU, func() { slice(b, what+" lead", lead, rate) }, func() { slice(b, what, records, rate) })
					profiles.Wait() // (the profiled cycle's figures include the profiler's cost)
					if c >= 0 {
						got[b.name] = append(got[b.name], w)
						progress(parallel, what, c, b.name, w)
					}
				}
			}
			for i, b := range bridges {
				if what == "paced" {
					e, _, _ := spanCounts(b.br.OpsURL, false)
					b.spans = e - ended0[i]
				}
			}
			return got
		}
		// A slice's lead: as long as the exporter's schedule delay and a quarter of the
		// slice, at least a record per stream.
		lead := func(n int, rate float64) int {
			l := max(n/4, parallel)
			if rate > 0 {
				l = max(l, int(rate*bspDelay.Seconds()))
			}
			return (l + parallel - 1) / parallel * parallel
		}
		paced := cycles("paced", *rounds, nPaced, lead(nPaced, float64(*rate)), float64(*rate))
		var sat map[string][]window
		if *satRounds > 0 {
			sat = cycles("saturated", *satRounds, nSat, lead(nSat, 0), 0)
		}
		for _, b := range bridges {
			if b.env != nil {
				// Spans ended but not exported once the export queue has drained (dropped
				// because the queue was full, or failed).
				_, _, lost := spanCounts(b.br.OpsURL, true)
				b.lost, b.lostBefore = lost-b.lostBefore, lost
			}
		}
		report(parallel, *rounds, *satRounds, nPaced, nSat, *size, *rate, bridges, paced, sat)
		fmt.Fprintf(os.Stderr, "p%d done after %s\n", parallel, time.Since(start).Round(time.Second))
	}
}

// bridge is a mode's bridge, running for the whole benchmark.
type bridge struct {
	mode
	br          *harness.Bridge
	topic       string
	spans, lost int64 // spans ended in this shape's paced cycles; spans lost in this shape
	lostBefore  int64
}

// window is a bridge's CPU over the measured part of one of its slices.
type window struct {
	records int
	elapsed time.Duration // of the measured part
	cpu     time.Duration // the bridge's over it
	broker  time.Duration // the broker's over it
}

func (w window) perSec() float64 { return float64(w.records) / w.elapsed.Seconds() }

func (w window) cpuPerRecord() float64 {
	return float64(w.cpu.Nanoseconds()) / 1e3 / float64(w.records)
}

// slice runs lead (untimed: the bridge busy again, its exporter's timer going), then the
// window: work (records records).
func (b *bridge) slice(records int, brokerCPU func() time.Duration, lead, work func()) window {
	lead()
	cpu, bk, t0 := b.br.CPU(), brokerCPU(), time.Now()
	work()
	return window{records: records, elapsed: time.Since(t0), cpu: b.br.CPU() - cpu, broker: brokerCPU() - bk}
}

// pair is a traced bridge's window and the untraced bridge's of the same cycle.
type pair struct{ x, off window }

// cost is x's cost in percent against off, by f (bigger is costlier).
func (p pair) cost(f func(window) float64) float64 { return (f(p.x)/f(p.off) - 1) * 100 }

// added is what x adds to f against off.
func (p pair) added(f func(window) float64) float64 { return f(p.x) - f(p.off) }

// mode is a configuration of the bridge's tracing.
type mode struct {
	name   string
	env    []string
	target float64 // the budget for its costs, in percent (0: none)
	bin    string  // the bridge binary, when not -bin's (-alt-bins)
}

// stat is a sample's median with a distribution-free confidence interval for it and
// its range: the machine's noise comes in bursts (another process's build, a GC of the
// broker) that make a few runs far off, which a mean and Student's t interval would
// follow and a median does not.
type stat struct {
	n                        int
	median, lo, hi, min, max float64
	coverage                 float64 // of [lo, hi]
}

// summarize gives v's median and the interval [v(k), v(n+1-k)] of its sorted values,
// with the largest k for which it holds the median with a probability of at least 95 %
// whatever the distribution (the sign test's: 1 - 2 P(Binomial(n, 1/2) < k)); with 5
// values or fewer no such k exists and [min, max] holds it with 1 - 2^(1-n).
func summarize(v []float64) stat {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	n := len(v)
	s := stat{n: n, median: v[n/2], min: v[0], max: v[n-1]}
	if n%2 == 0 {
		s.median = (v[n/2-1] + v[n/2]) / 2
	}
	// below[k] = P(Binomial(n, 1/2) < k)
	cdf := func(k int) float64 {
		var p, c float64 = 0, 1 // c = C(n, i)
		for i := range k {
			p += c
			c = c * float64(n-i) / float64(i+1)
		}
		return p / math.Pow(2, float64(n))
	}
	k := 1
	for k+1 <= n/2 && 1-2*cdf(k+1) >= 0.95 {
		k++
	}
	s.lo, s.hi, s.coverage = v[k-1], v[n-k], 1-2*cdf(k)
	return s
}

func (s stat) String() string {
	if s.n < 2 {
		return fmt.Sprintf("%+.1f %% (one round: no interval)", s.median)
	}
	if s.lo == s.min && s.hi == s.max {
		return fmt.Sprintf("%+.1f %% [%+.1f, %+.1f]", s.median, s.lo, s.hi)
	}
	return fmt.Sprintf("%+.1f %% [%+.1f, %+.1f] (%+.1f..%+.1f)", s.median, s.lo, s.hi, s.min, s.max)
}

// verdict says whether a cost is a result, against target (percent; 0: none).
func verdict(s stat, target float64) string {
	if s.coverage < 0.95 {
		return fmt.Sprintf("too few cycles for a verdict (a %.1f %% interval)", s.coverage*100)
	}
	zero := "distinguishable from 0"
	if s.lo <= 0 && s.hi >= 0 {
		zero = "not distinguishable from 0"
	}
	switch {
	case target == 0:
		return zero
	case s.hi <= target:
		return fmt.Sprintf("**meets** ≤ %g %% (%s)", target, zero)
	case s.lo > target:
		return fmt.Sprintf("**fails** ≤ %g %%", target)
	default:
		return fmt.Sprintf("noise: the interval spans %g %%", target)
	}
}

func report(parallel, rounds, satRounds, nPaced, nSat, size, rate int, bridges []*bridge, paced, sat map[string][]window) {
	cpu := func(w window) float64 { return w.cpuPerRecord() }
	seconds := func(w window) float64 { return 1 / w.perSec() } // per record: bigger is costlier
	med := func(v []float64, format string) string {
		sort.Float64s(v)
		return fmt.Sprintf(format+" ("+format+"-"+format+")", v[len(v)/2], v[0], v[len(v)-1])
	}
	of := func(ws []window, f func(window) float64) []float64 {
		var v []float64
		for _, w := range ws {
			v = append(v, f(w))
		}
		return v
	}
	pairs := func(got map[string][]window, name string) []pair {
		var ps []pair
		for c, w := range got[name] {
			ps = append(ps, pair{x: w, off: got["off"][c]})
		}
		return ps
	}
	costs := func(ps []pair, f func(pair) float64) stat {
		var v []float64
		for _, p := range ps {
			v = append(v, f(p))
		}
		return summarize(v)
	}
	kept := func(ws []window) string { // the achieved rate, and whether it kept up
		v := of(ws, window.perSec)
		sort.Float64s(v)
		s := fmt.Sprintf("%.0f", v[len(v)/2])
		late := 0 // windows more than 3 % and 50 ms (the last receipts) longer than the rate's
		for _, w := range ws {
			if rate > 0 && w.elapsed.Seconds() > float64(w.records)/float64(rate)*1.03+0.05 {
				late++
			}
		}
		if late > 0 {
			s += fmt.Sprintf(" (**%d of %d windows did not keep up**, min %.0f)", late, len(ws), v[0])
		}
		return s
	}
	offered := "as fast as the bridge takes them"
	if rate > 0 {
		offered = fmt.Sprintf("%d records/s offered", rate)
	}
	ci := func(n int) string { return fmt.Sprintf("%.1f %%", summarize(make([]float64, n)).coverage*100) }
	fmt.Printf("%d at once, paced: %d cycles of a slice of %d records of %d B for each bridge, %s. Each cost is a traced bridge's window against the untraced one's of the same cycle: the median of the cycles [a %s confidence interval for it] (range)\n\n",
		parallel, rounds, nPaced, size, offered, ci(rounds))
	fmt.Printf("| tracing | records/s | bridge CPU µs/record | added µs/record | **bridge CPU cost** | verdict | added / untraced CPU at saturation | sampled spans (lost) |\n|---|---|---|---|---|---|---|---|\n")
	var satOff float64
	if sat != nil {
		v := of(sat["off"], cpu)
		sort.Float64s(v)
		satOff = v[len(v)/2]
	}
	for _, b := range bridges {
		ws := paced[b.name]
		if b.name == "off" {
			fmt.Printf("| off | %s | %s | - | - | - | - | - |\n", kept(ws), med(of(ws, cpu), "%.3f"))
			continue
		}
		ps := pairs(paced, b.name)
		a := costs(ps, func(p pair) float64 { return p.added(cpu) })
		c := costs(ps, func(p pair) float64 { return p.cost(cpu) })
		vsSat := "-"
		if satOff > 0 {
			vsSat = fmt.Sprintf("%+.1f %% [%+.1f, %+.1f]", a.median/satOff*100, a.lo/satOff*100, a.hi/satOff*100)
		}
		fmt.Printf("| %s | %s | %s | %+.3f [%+.3f, %+.3f] | %s | %s | %s | %d (%d) |\n", b.name, kept(ws), med(of(ws, cpu), "%.3f"),
			a.median, a.lo, a.hi, c, verdict(c, b.target), vsSat, b.spans, b.lost)
	}
	fmt.Println()
	if sat == nil {
		return
	}
	fmt.Printf("%d at once, saturated: %d cycles of a slice of %d records for each bridge, after the paced ones; throughput cost: seconds per record against the untraced bridge's in the same cycle [%s confidence interval]\n\n", parallel, satRounds, nSat, ci(satRounds))
	fmt.Printf("| tracing | records/s | throughput cost | verdict | bridge CPU µs/record | bridge CPU cost | spans lost |\n|---|---|---|---|---|---|---|\n")
	for _, b := range bridges {
		ws := sat[b.name]
		if b.name == "off" {
			fmt.Printf("| off | %s | - | - | %s | - | - |\n", med(of(ws, window.perSec), "%.0f"), med(of(ws, cpu), "%.3f"))
			continue
		}
		ps := pairs(sat, b.name)
		t := costs(ps, func(p pair) float64 { return p.cost(seconds) })
		c := costs(ps, func(p pair) float64 { return p.cost(cpu) })
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %d |\n", b.name, med(of(ws, window.perSec), "%.0f"), t, verdict(t, b.target),
			med(of(ws, cpu), "%.3f"), c, b.lost)
	}
	fmt.Println()
}

// spanCounts reads bridge_trace_spans_total from the bridge: the spans ended and
// exported, and those ended but not exported (lost). With drain, it waits (at most
// 10 s) until the export queue has drained, so lost are those dropped or failed.
func spanCounts(opsURL string, drain bool) (ended, exported, lost int64) {
	// A counter past a million is written in exponent form (1.050009e+06).
	re := regexp.MustCompile(`(?m)^bridge_trace_spans_total\{[^}]*result="(\w+)"[^}]*\} (\S+)`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(opsURL + "/metrics")
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		n := map[string]int64{}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			f, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				log.Fatalf("bridge_trace_spans_total{result=%q}: %v", m[1], err)
			}
			n[m[1]] = int64(f)
		}
		if lost = n["ended"] - n["exported"]; !drain || lost == 0 || time.Now().After(deadline) {
			return n["ended"], n["exported"], lost
		}
	}
}

// rawCodec passes gRPC messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append((*v.(*[]byte))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// post sends one stream of records and fails the run unless all were persisted.
func post(dataURL, topic string, body *stream, what string) {
	req, _ := http.NewRequest(http.MethodPost, dataURL+"/v1/publish/bench", body)
	req.ContentLength = int64(body.n * len(body.record)) // not chunked
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("X-Topic", topic)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		log.Fatalf("%s: %d %s", what, resp.StatusCode, out)
	}
}

// stream is the body of a stream of n copies of record (a RecordIO frame), at rate
// records per second (0: as fast as it is read): Read returns the records due since the
// first Read (record i at i/rate s) and, when none is, waits 5 ms, so a slow reader is
// caught up with rather than the rate lowered.
type stream struct {
	record []byte
	n      int
	rate   float64
	t0     time.Time
	off    int // bytes read
}

func (s *stream) Read(p []byte) (int, error) {
	total := s.n * len(s.record)
	if s.off >= total {
		return 0, io.EOF
	}
	if s.t0.IsZero() {
		s.t0 = time.Now()
	}
	limit := total
	if s.rate > 0 {
		for {
			limit = min(int(time.Since(s.t0).Seconds()*s.rate)+1, s.n) * len(s.record)
			if limit > s.off {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	p = p[:min(len(p), limit-s.off)]
	for n := 0; n < len(p); {
		n += copy(p[n:], s.record[(s.off+n)%len(s.record):])
	}
	s.off += len(p)
	return len(p), nil
}
