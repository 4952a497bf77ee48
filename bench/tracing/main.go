// Command tracing measures what tracing costs ingress: the same records POSTed through
// the bridge binary with tracing off and with 1 %, 10 % and 100 % of the records sampled
// (parentbased_traceidratio; each record is sampled on its own; spans
// exported over OTLP/HTTP, or gRPC with -protocol grpc, to a sink in this process that
// accepts and drops them), alternating in one run, the order rotated every round; the
// median of the rounds for each mode, with the range. Two shapes: one stream at a time
// (a scheduler's sidecar) and eight at once (the machine saturated).
//
// With -fast, each sampling rate also runs with the fast path's tracing keys (-fast-keys,
// default tracing.recordSpans: direct and tracing.exporter: wire) in the same paired
// rounds, so one run compares off, the SDK's path and the fast one at 1, 10 and 100 %.
//
//	go run ./tracing -url pulsar://127.0.0.1:6650 -bin ../bin/bridge -rounds 5 -streams 100 -parallel 1,8 -fast
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
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
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	url := flag.String("url", os.Getenv("PULSAR_URL"), "broker URL")
	bin := flag.String("bin", "../bin/bridge", "the bridge binary (make build)")
	rounds := flag.Int("rounds", 7, "alternating rounds (the median of each mode is reported)")
	streams := flag.Int("streams", 200, "streams per run")
	per := flag.Int("records", 1000, "records per stream")
	size := flag.Int("size", 1024, "record size")
	shapes := flag.String("parallel", "1,8", "streams open at once: one run of every round per value")
	protocol := flag.String("protocol", "http/protobuf", "OTLP protocol: http/protobuf or grpc (the sink shares the machine; receiving gRPC costs it ~3x more CPU)")
	rate := flag.Int("rate", 0, "offered records per second per run (0: as fast as the bridge takes them)")
	profile := flag.String("profile", "", "a directory: in the last round, write the bridge's CPU profile and allocations (pprof) of each mode for -profile-seconds from the start of the timed run (make the runs last longer than that)")
	profileSeconds := flag.Int("profile-seconds", 5, "how long the -profile profiles last")
	fast := flag.Bool("fast", false, "also run each sampling rate with the -fast-keys tracing keys (modes \"fast 1 %\"...), in the same rounds")
	fastKeys := flag.String("fast-keys", "recordSpans=direct,exporter=wire", "the tracing section's keys of the -fast modes, key=value,... (for example recordSpans=direct alone)")
	flag.Parse()
	var fastYAML string
	for _, kv := range strings.Split(*fastKeys, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			log.Fatalf("-fast-keys %q: want key=value,...", *fastKeys)
		}
		fastYAML += fmt.Sprintf("  %s: %s\n", k, v)
	}
	harness.Pprof = *profile != ""
	if *url == "" {
		log.Fatal("no broker: set -url or PULSAR_URL (make bench-tracing starts one)")
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
	type mode struct {
		name    string
		env     []string
		tracing string // the configuration file's tracing section's keys
	}
	modes := []mode{{name: "off"}}
	for _, ratio := range []string{"0.01", "0.1", "1"} {
		pct, _ := strconv.ParseFloat(ratio, 64)
		env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink, "OTEL_EXPORTER_OTLP_PROTOCOL=" + *protocol,
			"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=" + ratio}
		modes = append(modes, mode{name: fmt.Sprintf("%g %%", pct*100), env: env})
		if *fast {
			modes = append(modes, mode{name: fmt.Sprintf("fast %g %%", pct*100), env: env, tracing: fastYAML})
		}
	}
	base := fmt.Sprintf("pulsar:\n  url: %s\nroutes:\n  - name: bench\n    namespaces: [public/default]\n    default: {topic: \"{header:X-Topic}\"}\n", *url)
	// The broker's process, when with-broker.sh started it, so that the CPU of every
	// process doing the work is counted (the bridge, the broker, this load generator and
	// its OTLP sink): on a saturated machine throughput is the cores divided by that.
	brokerPID := 0
	if b, err := os.ReadFile(filepath.Join(os.Getenv("PULSAR_STATE_DIR"), "pid")); err == nil {
		brokerPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	selfCPU := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // the load generator and the OTLP sink
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	brokerCPU := func() time.Duration {
		if brokerPID > 0 {
			return harness.ProcCPU(brokerPID)
		}
		return 0
	}
	procCPU := func(br *harness.Bridge) time.Duration { return br.CPU() + selfCPU() + brokerCPU() }
	type res struct {
		elapsed, cpu, all, broker time.Duration
		exports, spans, lost      int64
	}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var body []byte
	for range *per {
		body = recordio.AppendRecord(body, payload)
	}
	for _, f := range strings.Split(*shapes, ",") {
		parallel, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || parallel < 1 {
			log.Fatalf("-parallel %q: want a list of positive integers", *shapes)
		}
		all := map[string][]res{}
		// Round -1 warms the broker up (topic creation, the JIT) and is not counted.
		for r := -1; r < *rounds; r++ {
			for i := range modes {
				m := modes[(i+max(r, 0))%len(modes)] // no mode always runs first
				cfg := base
				if m.tracing != "" {
					cfg += "tracing:\n" + m.tracing
				}
				br, err := harness.StartBridge(*bin, cfg, m.env...)
				if err != nil {
					log.Fatal(err)
				}
				topic := fmt.Sprintf("bench-tracing-%d-%d", r, time.Now().UnixNano())
				// One record first, untimed: the topic is created and the producer connected.
				post(br.DataURL, topic, bytes.NewReader(recordio.AppendRecord(nil, payload)), m.name)
				e0 := exports.Load()
				cpu0, all0, b0, t0 := br.CPU(), procCPU(br), brokerCPU(), time.Now()
				next := make(chan int, *streams)
				for s := range *streams {
					next <- s
				}
				close(next)
				var wg, profiles sync.WaitGroup
				if *profile != "" && r == *rounds-1 {
					name := fmt.Sprintf("%s-p%d-%s", strings.TrimSuffix(strings.ReplaceAll(m.name, " ", ""), "%"), parallel, "%s.pprof")
					for _, kind := range []string{"profile", "allocs"} {
						profiles.Go(func() {
							fetchProfile(br.OpsURL, kind, *profileSeconds, filepath.Join(*profile, fmt.Sprintf(name, kind)))
						})
					}
				}
				for range parallel {
					wg.Go(func() {
						for s := range next {
							var rd io.Reader = bytes.NewReader(body)
							if *rate > 0 {
								rd = paced(body, *per, *rate/parallel)
							}
							post(br.DataURL, topic, rd, fmt.Sprintf("%s stream %d", m.name, s))
						}
					})
				}
				wg.Wait()
				x := res{elapsed: time.Since(t0), cpu: br.CPU() - cpu0, all: procCPU(br) - all0, broker: brokerCPU() - b0}
				profiles.Wait() // (the profiled round's figures include the profiler's cost)
				if m.env != nil {
					// Spans the bridge ended, and those not exported once its queue has
					// drained (dropped because the queue was full, or failed).
					x.spans, x.lost = spanCounts(br.OpsURL)
				}
				br.Stop() // flushes the span exporter
				x.exports = exports.Load() - e0
				if r >= 0 {
					all[m.name] = append(all[m.name], x)
				}
				us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(*streams**per) }
				fmt.Fprintf(os.Stderr, "round %d %-5s %7.0f records/s, µs/record: bridge %.2f, broker %.2f, load generator and sink %.2f; spans %d, lost %d\n", r, m.name,
					float64(*streams**per)/x.elapsed.Seconds(), us(x.cpu), us(x.broker), us(x.all-x.cpu-x.broker), x.spans, x.lost)
			}
		}
		n := float64(*streams * *per)
		median := func(name string, f func(res) float64) (med, lo, hi float64) {
			var v []float64
			for _, x := range all[name] {
				v = append(v, f(x))
			}
			sort.Float64s(v)
			return v[len(v)/2], v[0], v[len(v)-1]
		}
		perSec := func(x res) float64 { return n / x.elapsed.Seconds() }
		cpu := func(x res) float64 { return float64(x.cpu.Nanoseconds()) / 1e3 / n }
		allCPU := func(x res) float64 { return float64(x.all.Nanoseconds()) / 1e3 / n }
		if *rate > 0 {
			fmt.Printf("offered load: %d records/s\n\n", *rate)
		}
		fmt.Printf("%d rounds of %d streams (%d at once) × %d × %d B; medians (range)\n\n", *rounds, *streams, parallel, *per, *size)
		fmt.Printf("| tracing | records/s | bridge CPU µs/record | all CPU µs/record | throughput cost (paired) | bridge CPU cost (paired) | all CPU cost (paired) | OTLP exports | spans (lost) |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, m := range modes {
			r, rlo, rhi := median(m.name, perSec)
			c, clo, chi := median(m.name, cpu)
			var exports, spans, lost int64
			// The cost in each round against the same round's run without tracing (the
			// machine's speed drifts between rounds more than within one).
			var costs, bridgeCosts, cpuCosts []float64
			for i, x := range all[m.name] {
				exports += x.exports
				spans += x.spans
				lost += x.lost
				costs = append(costs, (perSec(all["off"][i])/perSec(x)-1)*100)
				bridgeCosts = append(bridgeCosts, (cpu(x)/cpu(all["off"][i])-1)*100)
				cpuCosts = append(cpuCosts, (allCPU(x)/allCPU(all["off"][i])-1)*100)
			}
			sort.Float64s(costs)
			sort.Float64s(bridgeCosts)
			sort.Float64s(cpuCosts)
			a, alo, ahi := median(m.name, allCPU)
			mid := func(v []float64) (float64, float64, float64) { return v[len(v)/2], v[0], v[len(v)-1] }
			tc, tlo, thi := mid(costs)
			bc, blo, bhi := mid(bridgeCosts)
			ac, aclo, achi := mid(cpuCosts)
			fmt.Printf("| %s | %.0f (%.0f-%.0f) | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %+.1f %% (%+.1f to %+.1f) | %+.1f %% (%+.1f to %+.1f) | %+.1f %% (%+.1f to %+.1f) | %d | %d (%d) |\n",
				m.name, r, rlo, rhi, c, clo, chi, a, alo, ahi, tc, tlo, thi, bc, blo, bhi, ac, aclo, achi, exports, spans, lost)
		}
		fmt.Println()
	}
}

// spanCounts reads bridge_trace_spans_total from the bridge: the spans ended, and those
// ended but not exported once the export queue has drained (at most 10 s).
func spanCounts(opsURL string) (ended, lost int64) {
	re := regexp.MustCompile(`(?m)^bridge_trace_spans_total\{[^}]*result="(\w+)"[^}]*\} (\d+)`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(opsURL + "/metrics")
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		n := map[string]int64{}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			n[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
		}
		if lost = n["ended"] - n["exported"]; lost == 0 || time.Now().After(deadline) {
			return n["ended"], lost
		}
	}
}

// fetchProfile writes the bridge's pprof profile kind (profile: CPU; allocs: the
// allocations made meanwhile) over the next seconds to path.
func fetchProfile(opsURL, kind string, seconds int, path string) {
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", opsURL, kind, seconds))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		log.Fatalf("%s profile: %d %v %s", kind, resp.StatusCode, err, b)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		log.Fatal(err)
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
func post(dataURL, topic string, body io.Reader, what string) {
	req, _ := http.NewRequest(http.MethodPost, dataURL+"/v1/publish/bench", body)
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

// paced feeds body (n records) at rate records per second, in 10 ms steps.
func paced(body []byte, n, rate int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		per := len(body) / n
		step := max(rate/100, 1) * per
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for off := 0; off < len(body); off += step {
			<-tick.C
			if _, err := pw.Write(body[off:min(off+step, len(body))]); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}
