// Command egress measures the bridge's egress against the direct path: a backlog of
// records read through the bridge binary as an HTTP RecordIO stream (a fresh
// subscription each round), and the same backlog drained by the official
// pulsar-client-go consumer, alternating in one run. Then, at a low rate, the latency
// from publishing a message to its arrival at the HTTP client, and at the official
// consumer for comparison. Last, the bridge's memory with idle streams open (-idle).
//
// "bridge CPU" is the bridge process's user+system time per message (from /proc), "client
// CPU" the load generator's: for the official path, the official consumer's own. With
// -alt-bin a second bridge binary drains the same backlog in the same rounds (path
// bridge-alt: a before/after comparison); -profile writes each bridge's CPU profile of
// its first round, and the bridge's heap with the idle streams open.
//
//	go run ./egress -url pulsar://127.0.0.1:6650 -bin ../bin/bridge -rounds 3
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	url := flag.String("url", os.Getenv("PULSAR_URL"), "broker URL")
	bin := flag.String("bin", "../bin/bridge", "the bridge binary (make build)")
	rounds := flag.Int("rounds", 3, "alternating rounds (the best of each is reported)")
	n := flag.Int("n", 100_000, "messages in the backlog")
	size := flag.Int("size", 1024, "message size in bytes")
	latN := flag.Int("lat", 1000, "messages for the latency figure (0 skips it)")
	rate := flag.Int("rate", 200, "messages per second for the latency figure")
	altBin := flag.String("alt-bin", "", "another bridge binary draining the same backlog in the same rounds, as path bridge-alt (a before/after comparison)")
	idle := flag.Int("idle", 1000, "idle streams for the memory figure (0 skips it)")
	profile := flag.String("profile", "", "a file name prefix: write each bridge's CPU profile of its first round to PREFIX-bridge.pprof (and PREFIX-bridge-alt.pprof; -n large enough for the round to outlast -profile-seconds), and the bridge's heap with the idle streams open to PREFIX-idle-heap.pprof, printing its runtime memory per stream")
	profileSeconds := flag.Int("profile-seconds", 2, "the profile's length")
	flag.Parse()
	harness.Pprof = *profile != ""
	harness.RequireBroker(*url, "bench-egress")
	stamp := time.Now().UnixNano()
	topic := fmt.Sprintf("persistent://public/default/bench-egress-%d", stamp)
	latTopic := fmt.Sprintf("persistent://public/default/bench-egress-lat-%d", stamp)
	idleTopic := fmt.Sprintf("persistent://public/default/bench-egress-idle-%d", stamp)
	cfg := fmt.Sprintf(`pulsar:
  url: %s
egress:
  maxStreams: %d
streams:
  - name: idle
    topics: [%s]
    type: shared
    position: latest
  - name: backlog
    topics: [%s]
    position: earliest
    overrides: [subscription]
  - name: latency
    topics: [%s]
    position: latest
`, *url, *idle+100, idleTopic, topic, latTopic)
	br, err := harness.StartBridge(*bin, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer br.Stop()
	bridges := map[string]*harness.Bridge{"bridge": br}
	paths := []string{"bridge", "official"}
	if *altBin != "" {
		alt, err := harness.StartBridge(*altBin, cfg)
		if err != nil {
			log.Fatal(err)
		}
		defer alt.Stop()
		bridges["bridge-alt"] = alt
		paths = []string{"bridge", "bridge-alt", "official"}
	}
	c := harness.MustOfficialClient(*url)
	defer c.Close()
	if err := backlog(c, topic, *size, *n); err != nil {
		log.Fatal(err)
	}

	type res struct{ elapsed, serverCPU, clientCPU time.Duration }
	best := map[string]res{}
	for r := range *rounds {
		for _, path := range paths {
			sub := fmt.Sprintf("%s-%d", path, r)
			b := bridges[path]
			var scpu0 time.Duration
			if b != nil {
				scpu0 = b.CPU()
			}
			ccpu0, t0 := harness.CPUTime(), time.Now()
			var profiled chan struct{}
			if b != nil && *profile != "" && r == 0 {
				profiled = make(chan struct{})
				go func() {
					defer close(profiled)
					harness.FetchProfile(b.OpsURL, "profile", *profileSeconds, fmt.Sprintf("%s-%s.pprof", *profile, path))
				}()
			}
			if b != nil {
				err = drainHTTP(b.DataURL+"/v1/streams/backlog?subscription="+sub, *n)
			} else {
				err = drainOfficial(c, topic, sub, *n)
			}
			if err != nil {
				log.Fatalf("%s: %v", path, err)
			}
			x := res{elapsed: time.Since(t0), clientCPU: harness.CPUTime() - ccpu0}
			if b != nil {
				x.serverCPU = b.CPU() - scpu0
			}
			if profiled != nil {
				<-profiled
			}
			// Each round on stderr: the best alone hides how far the rounds spread on a
			// shared machine, and a median of the CPU per message is steadier.
			cpu := x.clientCPU
			if b != nil {
				cpu = x.serverCPU
			}
			fmt.Fprintf(os.Stderr, "round %d %s: %.0f records/s, CPU %.2f µs/msg (load %s)\n", r, path,
				float64(*n)/x.elapsed.Seconds(), float64(cpu.Nanoseconds())/1e3/float64(*n), harness.LoadAvg())
			if b, ok := best[path]; !ok || x.elapsed < b.elapsed {
				best[path] = x
			}
		}
	}
	fmt.Printf("load average %s\n", harness.LoadAvg())
	fmt.Printf("| path | size | messages | records/s | MB/s | bridge CPU µs/msg | client CPU µs/msg |\n|---|---|---|---|---|---|---|\n")
	label := map[string]string{"bridge": "broker -> bridge -> HTTP RecordIO client", "bridge-alt": "broker -> bridge (-alt-bin) -> HTTP RecordIO client", "official": "broker -> official consumer"}
	for _, path := range paths {
		x := best[path]
		rps := float64(*n) / x.elapsed.Seconds()
		bcpu := "-"
		if path != "official" {
			bcpu = fmt.Sprintf("%.2f", float64(x.serverCPU.Nanoseconds())/1e3/float64(*n))
		}
		fmt.Printf("| %s | %d B | %d | %.0f | %.1f | %s | %.2f |\n", label[path], *size, *n, rps, rps*float64(*size)/1e6, bcpu,
			float64(x.clientCPU.Nanoseconds())/1e3/float64(*n))
	}
	// The bridge's CPU column of a ratio row: the bridge's own CPU per message against
	// the official consumer's.
	for _, path := range paths[:len(paths)-1] {
		fmt.Printf("| ratio %s/official | %d B | | %.2fx | | %.2fx | |\n", path, *size,
			best["official"].elapsed.Seconds()/best[path].elapsed.Seconds(), float64(best[path].serverCPU)/float64(best["official"].clientCPU))
	}

	if *latN > 0 {
		hb, ho, err := latency(c, br.DataURL+"/v1/streams/latency", latTopic, *latN, *rate)
		if err != nil {
			log.Fatal(err)
		}
		slices.Sort(hb)
		slices.Sort(ho)
		fmt.Printf("\npublish-to-delivery latency, %d messages at %d/s: HTTP client through the bridge p50 %s p99 %s; official consumer p50 %s p99 %s\n",
			*latN, *rate, pct(hb, 0.5), pct(hb, 0.99), pct(ho, 0.5), pct(ho, 0.99))
	}
	if *idle > 0 {
		heap := ""
		if *profile != "" {
			heap = *profile + "-idle-heap.pprof"
		}
		before, after, err := idleStreams(br, br.DataURL+"/v1/streams/idle", *idle, heap)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("\nbridge memory with %d idle streams open: RSS %.1f MiB before, %.1f MiB with them (%.1f KiB per stream)\n",
			*idle, float64(before)/(1<<20), float64(after)/(1<<20), float64(after-before)/1024/float64(*idle))
	}
}

// idleStreams opens n GET streams of one shared subscription of a topic nobody
// publishes to, and reports the bridge's RSS before and while they are open. One
// subscription: the bridge holds a consumer per GET either way, and the broker (often
// shared) keeps one cursor instead of n. With heap set, the bridge's heap profile is
// written there while they are open.
func idleStreams(br *harness.Bridge, url string, n int, heap string) (before, after int64, err error) {
	time.Sleep(time.Second)
	before = br.RSS()
	var msBefore harness.MemStats
	if harness.Pprof {
		msBefore, _ = harness.FetchMemStats(br.OpsURL)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2000, MaxConnsPerHost: 0, DisableCompression: true}}
	bodies := make([]io.ReadCloser, 0, n)
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	for i := range n {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept", "application/recordio")
		resp, err := client.Do(req)
		if err != nil {
			return before, 0, fmt.Errorf("stream %d: %w", i, err)
		}
		bodies = append(bodies, resp.Body)
		if resp.StatusCode != 200 {
			return before, 0, fmt.Errorf("stream %d: %s", i, resp.Status)
		}
	}
	time.Sleep(2 * time.Second)
	after = br.RSS()
	if heap != "" {
		harness.FetchProfile(br.OpsURL, "heap", 0, heap)
		harness.FetchProfile(br.OpsURL, "goroutine?debug=1", 0, strings.TrimSuffix(heap, "heap.pprof")+"goroutines.txt")
	}
	if harness.Pprof {
		if ms, err := harness.FetchMemStats(br.OpsURL); err == nil {
			fmt.Printf("bridge runtime memory with %d idle streams open: %s\n", n, ms.PerStream(msBefore, n))
		}
	}
	return before, after, nil
}

func pct(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[int(float64(len(l)-1)*q)].Round(10 * time.Microsecond)
}

func backlog(c official.Client, topic string, size, n int) error {
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range n {
		wg.Add(1)
		p.SendAsync(context.Background(), &official.ProducerMessage{Payload: payload}, func(_ official.MessageID, _ *official.ProducerMessage, err error) {
			if err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	return first
}

// drainHTTP reads n records from a bridge stream (ack=auto).
func drainHTTP(url string, n int) error {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	rd := recordio.NewReader(resp.Body)
	for i := range n {
		if _, err := rd.Next(); err != nil {
			return fmt.Errorf("after %d records: %w", i, err)
		}
	}
	return nil
}

func drainOfficial(c official.Client, topic, sub string, n int) error {
	cons, err := c.Subscribe(official.ConsumerOptions{Topic: topic, SubscriptionName: sub, SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		return err
	}
	defer cons.Close()
	for i := range n {
		m, err := cons.Receive(context.Background())
		if err != nil {
			return fmt.Errorf("after %d: %w", i, err)
		}
		_ = cons.Ack(m)
	}
	return nil
}

// latency publishes n stamped messages at rate per second and measures when each reaches
// an HTTP client of the bridge and an official consumer, both subscribed beforehand.
func latency(c official.Client, url, topic string, n, rate int) (viaBridge, direct []time.Duration, err error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	cons, err := c.Subscribe(official.ConsumerOptions{Topic: topic, SubscriptionName: "lat-official"})
	if err != nil {
		return nil, nil, err
	}
	defer cons.Close()
	time.Sleep(500 * time.Millisecond)
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		rd := recordio.NewReader(resp.Body)
		for range n {
			rec, e := rd.Next()
			if e != nil {
				err = e
				return
			}
			viaBridge = append(viaBridge, time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(rec)))))
		}
	}()
	go func() {
		defer wg.Done()
		for range n {
			m, e := cons.Receive(context.Background())
			if e != nil {
				err = e
				return
			}
			direct = append(direct, time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload())))))
			_ = cons.Ack(m)
		}
	}()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	payload := make([]byte, 1024)
	for range n {
		<-tick.C
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		p.SendAsync(context.Background(), &official.ProducerMessage{Payload: append([]byte(nil), payload...)}, nil)
	}
	wg.Wait()
	return viaBridge, direct, err
}
