// Command acks measures what egress's acknowledgements cost a client (ack=client): the
// acknowledgements per second a client that reads k records and then posts their
// positions to /ack reaches, and the p50 and p99 of /ack, with the broker's
// confirmation waited for (ackReceipt: true, the default) and with the answer given
// once the acknowledgement is queued (ackReceipt: false), alternating in one run.
//
//	go run ./acks -url pulsar://127.0.0.1:6650 -bin ../bin/bridge -rounds 3
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
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
	rounds := flag.Int("rounds", 3, "alternating rounds (the best of each is reported)")
	n := flag.Int("n", 5000, "messages read and acknowledged per measurement")
	ks := flag.String("k", "1,50", "records per /ack, comma-separated")
	flag.Parse()
	harness.RequireBroker(*url, "bench-acks")
	topic := fmt.Sprintf("persistent://public/default/bench-acks-%d", time.Now().UnixNano())
	stream := func(name string, receipt bool) string {
		return fmt.Sprintf(`  - name: %s
    topics: [%s]
    type: shared
    position: earliest
    ack: client
    ackReceipt: %t
    overrides: [subscription]
`, name, topic, receipt)
	}
	br := harness.MustStartBridge(*bin, fmt.Sprintf("pulsar:\n  url: %s\nstreams:\n%s%s", *url, stream("receipt", true), stream("queued", false)))
	defer br.Stop()
	c := harness.MustOfficialClient(*url)
	defer c.Close()
	if err := publish(c, topic, *n); err != nil {
		log.Fatal(err)
	}
	type res struct {
		rate     float64
		p50, p99 time.Duration
	}
	best := map[string]res{}
	var order []string
	for r := range *rounds {
		for _, kv := range strings.Split(*ks, ",") {
			k, err := strconv.Atoi(kv)
			if err != nil || k < 1 {
				log.Fatalf("-k: %q", kv)
			}
			for _, mode := range []string{"receipt", "queued"} {
				key := fmt.Sprintf("%-7s k=%d", mode, k)
				rate, lat, err := run(br.DataURL+"/v1/streams/"+mode+"?subscription="+fmt.Sprintf("%s-%d-%d", mode, k, r), *n, k)
				if err != nil {
					log.Fatal(err)
				}
				slices.Sort(lat)
				x := res{rate: rate, p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}
				if b, ok := best[key]; !ok || x.rate > b.rate {
					if !ok {
						order = append(order, key)
					}
					best[key] = x
				}
				fmt.Printf("round %d %s: %8.0f acks/s, /ack p50 %v p99 %v\n", r, key, x.rate, x.p50, x.p99)
			}
		}
	}
	fmt.Println("best of each:")
	for _, key := range order {
		x := best[key]
		fmt.Printf("%s: %8.0f acks/s, /ack p50 %v p99 %v\n", key, x.rate, x.p50.Round(10*time.Microsecond), x.p99.Round(10*time.Microsecond))
	}
}

// publish writes n small messages (the official client's default batching).
func publish(c official.Client, topic string, n int) error {
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		wg.Add(1)
		p.SendAsync(context.Background(), &official.ProducerMessage{Payload: []byte(fmt.Sprintf(`{"seq":%d}`, i))},
			func(_ official.MessageID, _ *official.ProducerMessage, err error) {
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

// run reads n records from a fresh subscription, posting the positions of every k to
// /ack and waiting for its answer before reading on; it returns the acknowledgements per
// second and each /ack's latency.
func run(url string, n, k int) (float64, []time.Duration, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	ackURL := strings.Replace(url, "?", "/ack?", 1)
	ackURL = ackURL[:strings.Index(ackURL, "?")]
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	var lat []time.Duration
	pos := make([]int, 0, k)
	start := time.Now()
	for i := range n {
		if _, err := rd.Next(); err != nil {
			return 0, nil, fmt.Errorf("after %d records: %w", i, err)
		}
		pos = append(pos, i)
		if len(pos) < k && i < n-1 {
			continue
		}
		body, _ := json.Marshal(pos)
		areq, _ := http.NewRequest(http.MethodPost, ackURL, bytes.NewReader(body))
		areq.Header.Set("Content-Type", "application/json")
		areq.Header.Set("Stream-Id", sid)
		t0 := time.Now()
		aresp, err := http.DefaultClient.Do(areq)
		if err != nil {
			return 0, nil, err
		}
		var ans map[string]any
		_ = json.NewDecoder(aresp.Body).Decode(&ans)
		aresp.Body.Close()
		lat = append(lat, time.Since(t0))
		if aresp.StatusCode != 200 || ans["acked"] != float64(len(pos)) {
			return 0, nil, fmt.Errorf("/ack: %d %v", aresp.StatusCode, ans)
		}
		pos = pos[:0]
	}
	return float64(n) / time.Since(start).Seconds(), lat, nil
}
