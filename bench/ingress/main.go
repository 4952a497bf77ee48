// Command ingress measures the bridge's main job against the direct path: the same
// records POSTed as one RecordIO stream through the bridge binary into the broker, and
// published by the official pulsar-client-go straight to the broker, alternating in one
// run. It prints a Markdown table (records/s, the bridge process's CPU per record, the
// client's CPU per record), then the bridge's costs by round (CPU, allocations and read
// and write system calls per record, with the load average), and the bridge's memory with
// 1 000 idle streams open. With -alt-bin a second binary takes its turn in every round,
// so a change is measured before and after under the same load.
//
//	go run ./ingress -url pulsar://127.0.0.1:6650 -bin ../bin/bridge -rounds 3
//	go run ./ingress -bin /tmp/bridge-before -alt-bin ../bin/bridge -rounds 3 -sizes 1024 -idle 0 -n 200000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	url := harness.BrokerFlag()
	bin := harness.BinFlag()
	altBin := flag.String("alt-bin", "", "another bridge binary run in the same rounds, between the first and the official client (a before/after comparison: path bridge-alt)")
	rounds := flag.Int("rounds", 3, "alternating rounds per size (the best of each is reported)")
	n := flag.Int("n", 100_000, "records per run")
	sizesFlag := flag.String("sizes", "100,1024", "record sizes in bytes")
	idle := flag.Int("idle", 1000, "idle streams for the memory figure (0 skips it)")
	profile := flag.String("profile", "", "a file name prefix: write the bridge's CPU profile of its first round at each size to PREFIX-SIZE.pprof (-n large enough for the round to outlast -profile-seconds), and its heap with the idle streams open to PREFIX-idle-heap.pprof; with -alt-bin, the other binary's to PREFIX-alt-SIZE.pprof")
	profileSeconds := flag.Int("profile-seconds", 2, "the profile's length")
	officialPending := flag.Int("official-pending", 0, "the official client's MaxPendingMessages (0: its default, 1000); the bridge's counterpart is ingress.pendingRecords (4096 by default): pass 4096 to compare the two with the same number of records in flight")
	flag.Parse()
	harness.Pprof = *profile != ""
	harness.RequireBroker(*url, "bench-ingress")
	br, err := startBridge(*bin, *url, *idle)
	if err != nil {
		log.Fatal(err)
	}
	defer br.Stop()
	bridges := map[string]*bridge{"bridge": br}
	paths := []string{"bridge", "official"}
	if *altBin != "" {
		alt, err := startBridge(*altBin, *url, 0)
		if err != nil {
			log.Fatal(err)
		}
		defer alt.Stop()
		bridges["bridge-alt"] = alt
		paths = []string{"bridge", "bridge-alt", "official"}
	}
	labels := map[string]string{"bridge": "HTTP RecordIO -> bridge -> broker", "bridge-alt": "HTTP RecordIO -> bridge (-alt-bin) -> broker", "official": "official client -> broker"}

	var costs []string
	fmt.Printf("| path | size | records | records/s | MB/s | bridge CPU µs/record | client CPU µs/record |\n|---|---|---|---|---|---|---|\n")
	for _, f := range strings.Split(*sizesFlag, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			log.Fatalf("-sizes: %v", err)
		}
		best := map[string]result{}
		all := map[string][]result{}
		for r := range *rounds {
			// The paths take turns in every round, the order rotating, so that neither
			// binary always follows the official client (which leaves the broker's journal
			// busier or quieter for the next run).
			order := make([]string, 0, len(paths))
			for i := range paths {
				order = append(order, paths[(i+r)%len(paths)])
			}
			for _, path := range order {
				topic := fmt.Sprintf("bench-ingress-%s-%d-%d-%d", path, size, r, time.Now().UnixNano())
				var res result
				if b := bridges[path]; b != nil {
					var profiled chan struct{}
					if *profile != "" && r == 0 {
						name := fmt.Sprintf("%s-%d.pprof", *profile, size)
						if path == "bridge-alt" {
							name = fmt.Sprintf("%s-alt-%d.pprof", *profile, size)
						}
						profiled = make(chan struct{})
						go func() {
							defer close(profiled)
							harness.FetchProfile(b.OpsURL, "profile", *profileSeconds, name)
						}()
					}
					res, err = b.run(topic, size, *n)
					if profiled != nil {
						<-profiled
					}
				} else {
					res, err = runOfficial(*url, "persistent://public/default/"+topic, size, *n, *officialPending)
				}
				if err != nil {
					log.Fatalf("%s %d B: %v", path, size, err)
				}
				res.load = harness.LoadAvg()
				all[path] = append(all[path], res)
				if b, ok := best[path]; !ok || res.elapsed < b.elapsed {
					best[path] = res
				}
			}
		}
		for _, path := range paths {
			r := best[path]
			rate := float64(r.count) / r.elapsed.Seconds()
			bcpu := "-"
			if bridges[path] != nil {
				bcpu = fmt.Sprintf("%.2f", r.bridgeCPU())
			}
			fmt.Printf("| %s | %d B | %d | %.0f | %.1f | %s | %.2f |\n", labels[path], size, r.count, rate, rate*float64(size)/1e6, bcpu,
				float64(r.clientCPU.Nanoseconds())/1e3/float64(r.count))
		}
		b, o := best["bridge"], best["official"]
		fmt.Printf("| ratio bridge/official | %d B | | %.2fx | | | |\n", size, o.elapsed.Seconds()/b.elapsed.Seconds())
		if a, ok := best["bridge-alt"]; ok {
			fmt.Printf("| ratio bridge-alt/official | %d B | | %.2fx | | | |\n", size, o.elapsed.Seconds()/a.elapsed.Seconds())
		}
		for _, path := range paths {
			if bridges[path] != nil {
				costs = append(costs, costLine(path, size, all[path]))
			}
		}
	}
	// Per round, as CPU per record is compared: the best round by time is not the
	// cheapest, and a median of the rounds is steadier than either.
	fmt.Printf("\n| bridge | size | CPU µs/record by round (median) | allocations/record | read+write syscalls/record | load average by round |\n|---|---|---|---|---|---|\n")
	for _, l := range costs {
		fmt.Println(l)
	}
	if *idle > 0 {
		heap := ""
		if *profile != "" {
			heap = *profile + "-idle-heap.pprof"
		}
		before, after, err := br.idleStreams(*idle, heap)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("\nbridge memory with %d idle streams open: RSS %.1f MiB before, %.1f MiB with them (%.1f KiB per stream)\n",
			*idle, float64(before)/(1<<20), float64(after)/(1<<20), float64(after-before)/1024/float64(*idle))
	}
}

// costLine is one bridge binary's row of the cost table: each round's CPU per record
// and the medians of the rounds.
func costLine(path string, size int, rs []result) string {
	var cpu, allocs, sys []float64
	var rounds, loads []string
	for _, r := range rs {
		c := r.bridgeCPU()
		cpu = append(cpu, c)
		rounds = append(rounds, fmt.Sprintf("%.2f", c))
		if r.counters.Mallocs >= 0 {
			allocs = append(allocs, float64(r.counters.Mallocs)/float64(r.count))
		}
		sys = append(sys, float64(r.counters.Syscalls)/float64(r.count))
		loads = append(loads, strings.Fields(r.load)[0])
	}
	a := "-"
	if len(allocs) == len(rs) {
		a = fmt.Sprintf("%.2f", median(allocs))
	}
	return fmt.Sprintf("| %s | %d B | %s (**%.2f**) | %s | %.3f | %s |", path, size, strings.Join(rounds, ", "), median(cpu), a, median(sys), strings.Join(loads, ", "))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type result struct {
	count     int
	elapsed   time.Duration
	serverCPU time.Duration
	clientCPU time.Duration
	published int64
	counters  harness.Counters // the bridge's, over the run
	load      string           // the load average after the run
}

// bridgeCPU is the bridge's CPU per record in µs.
func (r result) bridgeCPU() float64 {
	return float64(r.serverCPU.Nanoseconds()) / 1e3 / float64(r.count)
}

type bridge struct {
	*harness.Bridge
	client *http.Client
}

func startBridge(bin, pulsarURL string, idle int) (*bridge, error) {
	hb, err := harness.StartBridge(bin, fmt.Sprintf(`pulsar:
  url: %s
ingress:
  maxStreams: %d
  idleTimeout: 10m
routes:
  - name: bench
    namespaces: [public/default]
    default: {topic: "{header:X-Topic}"}
`, pulsarURL, idle+100))
	if err != nil {
		return nil, err
	}
	return &bridge{Bridge: hb, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2000, DisableCompression: true}}}, nil
}

// run POSTs count records of size bytes as one stream (one-answer mode, as a scheduler
// that only checks the final status would) and waits for the summary.
func (b *bridge) run(topic string, size, count int) (result, error) {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	// The body is framed ahead of time in 1 MiB pieces so the client does little work.
	var chunk []byte
	per := 0
	for len(chunk) < 1<<20 {
		chunk = recordio.AppendRecord(chunk, payload)
		per++
	}
	pr, pw := io.Pipe()
	go func() {
		left := count
		for left > 0 {
			k := min(left, per)
			end := len(chunk) / per * k
			if _, err := pw.Write(chunk[:end]); err != nil {
				return
			}
			left -= k
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, b.DataURL+"/v1/publish/bench", pr)
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("X-Topic", topic)
	cnt0 := b.Counters()
	scpu0, ccpu0, t0 := b.CPU(), harness.CPUTime(), time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		return result{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	elapsed := time.Since(t0)
	res := result{count: count, elapsed: elapsed, serverCPU: b.CPU() - scpu0, clientCPU: harness.CPUTime() - ccpu0}
	res.counters = b.Counters().Sub(cnt0)
	if err != nil {
		return res, err
	}
	if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf(`"published":%d`, count)) {
		return res, fmt.Errorf("bridge answered %d: %s", resp.StatusCode, body)
	}
	return res, nil
}

// idleStreams opens n streams, each with one receipted record, and reports the bridge's
// RSS before and while they are open.
// With heap set, the bridge's heap profile is written there while they are open.
func (b *bridge) idleStreams(n int, heap string) (before, after int64, err error) {
	time.Sleep(time.Second)
	before = b.RSS()
	var msBefore harness.MemStats
	if harness.Pprof {
		msBefore, _ = harness.FetchMemStats(b.OpsURL)
	}
	type open struct {
		pw   *io.PipeWriter
		resp *http.Response
	}
	streams := make([]open, 0, n)
	defer func() {
		for _, s := range streams {
			s.pw.Close()
			_, _ = io.Copy(io.Discard, s.resp.Body)
			s.resp.Body.Close()
		}
	}()
	topic := fmt.Sprintf("bench-idle-%d", time.Now().UnixNano())
	for i := range n {
		pr, pw := io.Pipe()
		req, _ := http.NewRequest(http.MethodPost, b.DataURL+"/v1/publish/bench", pr)
		req.Header.Set("Content-Type", "application/recordio")
		req.Header.Set("Message-Content-Type", "application/json")
		req.Header.Set("Accept", "application/recordio")
		req.Header.Set("X-Topic", topic)
		go func() { _, _ = pw.Write(recordio.AppendRecord(nil, []byte(`{"idle":true}`))) }()
		resp, err := b.client.Do(req)
		if err != nil {
			return before, 0, fmt.Errorf("stream %d: %w", i, err)
		}
		streams = append(streams, open{pw, resp})
		rd := recordio.NewReader(resp.Body)
		if rec, err := rd.Next(); err != nil || !strings.Contains(string(rec), `"status":200`) {
			return before, 0, fmt.Errorf("stream %d: receipt %q, %v", i, rec, err)
		}
	}
	time.Sleep(2 * time.Second)
	after = b.RSS()
	if heap != "" {
		harness.FetchProfile(b.OpsURL, "heap", 0, heap)
	}
	if harness.Pprof {
		if ms, err := harness.FetchMemStats(b.OpsURL); err == nil {
			fmt.Printf("bridge runtime memory with %d idle streams open: %s\n", n, ms.PerStream(msBefore, n))
		}
	}
	return before, after, nil
}

func runOfficial(url, topic string, size, count, pending int) (result, error) {
	c, err := official.NewClient(official.ClientOptions{URL: url, Logger: harness.QuietLogger()})
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, MaxPendingMessages: pending})
	if err != nil {
		return result{}, err
	}
	defer p.Close()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	wg.Add(count)
	ccpu0, t0 := harness.CPUTime(), time.Now()
	for range count {
		p.SendAsync(context.Background(), &official.ProducerMessage{Payload: payload}, func(_ official.MessageID, _ *official.ProducerMessage, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	return result{count: count, elapsed: time.Since(t0), clientCPU: harness.CPUTime() - ccpu0}, firstErr
}
