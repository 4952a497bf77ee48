// Command producer publishes the same messages with the bridge's own Pulsar producer
// and with the official pulsar-client-go, one after the other on the same broker, and
// prints a Markdown table: messages/s, MB/s, send latency p50/p99, and client CPU per
// message. Each run is a process of its own (this command run again with -child), so
// its CPU time (user+system of that process while it sent) bills one client only: in
// one process the garbage one client left behind was collected during the other's run.
//
//	go run ./producer -url pulsar://127.0.0.1:6650 -rounds 3
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/pulsar"
)

type result struct {
	client      string
	size, count int
	elapsed     time.Duration
	cpu         time.Duration
	lat         []time.Duration
}

func main() {
	url := harness.BrokerFlag()
	rounds := flag.Int("rounds", 2, "alternating rounds per size (the best of each is reported)")
	only := flag.Int("size", 0, "run only this message size (100, 1024 or 65536)")
	n := flag.Int("n", 0, "messages per run (default: 200 000, 100 000 and 4 000 by size)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the bridge's runs to this file")
	child := flag.String("child", "", "internal: run one client (bridge or official) once on -topic and print its result")
	topicFlag := flag.String("topic", "", "internal: the -child run's topic")
	flag.Parse()
	if *child != "" {
		runChild(*child, *url, *topicFlag, *only, *n, *profile)
		return
	}
	harness.RequireBroker(*url, "bench")
	sizes := []struct{ size, count int }{{100, 200_000}, {1024, 100_000}, {64 << 10, 4_000}}
	fmt.Printf("| client | size | messages | msgs/s | MB/s | p50 | p99 | CPU µs/msg |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range sizes {
		if *only != 0 && s.size != *only {
			continue
		}
		if *n > 0 {
			s.count = *n
		}
		best := map[string]result{}
		for r := range *rounds {
			for _, c := range []string{"bridge", "official"} {
				topic := fmt.Sprintf("persistent://public/default/bench-%s-%d-%d-%d", c, s.size, r, time.Now().UnixNano())
				prof := ""
				if c == "bridge" {
					prof = *profile
				}
				res, err := spawn(c, *url, topic, s.size, s.count, prof)
				if err != nil {
					log.Fatalf("%s %d B: %v", c, s.size, err)
				}
				if b, ok := best[c]; !ok || res.elapsed < b.elapsed {
					best[c] = res
				}
			}
		}
		for _, c := range []string{"bridge", "official"} {
			r := best[c]
			slices.Sort(r.lat)
			rate := float64(r.count) / r.elapsed.Seconds()
			fmt.Printf("| %s | %d B | %d | %.0f | %.1f | %s | %s | %.2f |\n", c, r.size, r.count, rate,
				rate*float64(r.size)/1e6, pct(r.lat, 0.50), pct(r.lat, 0.99), float64(r.cpu.Microseconds())/float64(r.count))
		}
		b, o := best["bridge"], best["official"]
		fmt.Printf("| ratio bridge/official | %d B | | %.2fx | | | | %.2fx |\n", s.size,
			o.elapsed.Seconds()/b.elapsed.Seconds(), (float64(b.cpu)/float64(b.count))/(float64(o.cpu)/float64(o.count)))
	}
}

// childResult is what a -child run prints: its timings, CPU and latencies.
type childResult struct {
	Elapsed time.Duration
	CPU     time.Duration
	Lat     []time.Duration
}

// spawn runs one client once in a process of its own.
func spawn(client, url, topic string, size, count int, profile string) (result, error) {
	cmd := exec.Command(os.Args[0], "-child", client, "-url", url, "-topic", topic, "-size", strconv.Itoa(size),
		"-n", strconv.Itoa(count), "-cpuprofile", profile)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("the %s run: %w", client, err)
	}
	var cr childResult
	if err := json.Unmarshal(out, &cr); err != nil {
		return result{}, fmt.Errorf("the %s run printed %q: %w", client, out, err)
	}
	return result{client: client, size: size, count: count, elapsed: cr.Elapsed, cpu: cr.CPU, lat: cr.Lat}, nil
}

// runChild is a -child process: one run of one client, its result as JSON on stdout.
func runChild(client, url, topic string, size, count int, profile string) {
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			log.Fatal(err)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	run := runOfficial
	if client == "bridge" {
		run = runOurs
	}
	res, err := run(url, topic, size, count)
	if err != nil {
		log.Fatalf("%s %d B: %v", client, size, err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(childResult{Elapsed: res.elapsed, CPU: res.cpu, Lat: res.lat}); err != nil {
		log.Fatal(err)
	}
}

func pct(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[int(float64(len(l)-1)*q)].Round(10 * time.Microsecond)
}

// measure sends count messages through send and times every callback.
func measure(name string, size, count int, send func(payload []byte, done func(error))) (result, error) {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	lat := make([]time.Duration, count)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	wg.Add(count)
	cpu0, t0 := harness.CPUTime(), time.Now()
	for i := range count {
		start := time.Now()
		send(payload, func(err error) {
			lat[i] = time.Since(start)
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
	return result{client: name, size: size, count: count, elapsed: time.Since(t0), cpu: harness.CPUTime() - cpu0, lat: lat}, firstErr
}

func runOurs(url, topic string, size, count int) (result, error) {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url})
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	ctx := context.Background()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return result{}, err
	}
	defer p.Close()
	return measure("bridge", size, count, func(payload []byte, done func(error)) {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, err error) { done(err) })
	})
}

func runOfficial(url, topic string, size, count int) (result, error) {
	c, err := official.NewClient(official.ClientOptions{URL: url, Logger: harness.QuietLogger()})
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	ctx := context.Background()
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic})
	if err != nil {
		return result{}, err
	}
	defer p.Close()
	return measure("official", size, count, func(payload []byte, done func(error)) {
		p.SendAsync(ctx, &official.ProducerMessage{Payload: payload}, func(_ official.MessageID, _ *official.ProducerMessage, err error) { done(err) })
	})
}
