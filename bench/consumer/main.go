// Command consumer drains the same backlog with the bridge's own consumer and with the
// official pulsar-client-go (each on a fresh subscription of one topic, alternating,
// in one run) and prints a Markdown table: messages/s, MB/s and client CPU per message.
// Both acknowledge every message (grouped) and use a receiver queue of 1000. The table
// gives each client's best round and the median of the ratios of each round's pair; the
// clients take turns going first; -each prints every round; with -admin each backlog
// topic is deleted once measured. The bridge's
// consumer is configured as the bridge configures it for an egress stream: a window of
// -queue-bytes per partition (receiverQueueBytes, 1 MiB by default) charged to a
// process-wide budget of -budget bytes (memory.budget, 128 MiB); -queue-bytes 0 and
// -budget 0 measure it bounded in messages only.
//
//	go run ./consumer -url pulsar://127.0.0.1:6650 -rounds 3 -sizes 16384
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
)

func main() {
	url := harness.BrokerFlag()
	rounds := flag.Int("rounds", 2, "alternating rounds per size (the best of each is reported)")
	sizesFlag := flag.String("sizes", "100,1024,16384", "message sizes in bytes, comma-separated (a backlog of about 160 MB each, 2 000 to 200 000 messages)")
	queueBytes := flag.Int("queue-bytes", 1<<20, "the bridge consumer's ReceiverQueueBytes (the bridge's receiverQueueBytes); 0: bounded in messages only")
	budgetBytes := flag.Int64("budget", 128<<20, "the process-wide budget the bridge consumer charges (the bridge's memory.budget); 0: none")
	admin := flag.String("admin", os.Getenv("PULSAR_ADMIN_URL"), "broker admin URL, to delete each backlog topic once measured (a run leaves about 160 MB per size on the broker otherwise)")
	each := flag.Bool("each", false, "also print every round's figures, with the load average after it, to stderr")
	flag.Parse()
	harness.RequireBroker(*url, "bench")
	var sizes []struct{ size, count int }
	for _, f := range strings.Split(*sizesFlag, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || size < 1 {
			log.Fatalf("-sizes: %q is not a message size in bytes", f)
		}
		// About 160 MB of backlog (the broker keeps it until the topic is deleted), and
		// between 2 000 and 200 000 messages.
		sizes = append(sizes, struct{ size, count int }{size, min(200_000, max(2_000, 160_000_000/size))})
	}
	opts := pulsar.ConsumerOptions{ReceiverQueueBytes: *queueBytes}
	if *budgetBytes > 0 {
		opts.MemoryLimiter = budget.New(*budgetBytes)
		opts.KeepMemoryCharge = true
	}
	if *rounds < 1 || *rounds > 8 {
		log.Fatalf("-rounds: %d is not between 1 and 8", *rounds)
	}
	fmt.Printf("load average %s; bridge consumer: receiverQueueBytes %d, budget %d\n", harness.LoadAvg(), *queueBytes, *budgetBytes)
	fmt.Printf("| client | size | messages | msgs/s | MB/s | CPU µs/msg |\n|---|---|---|---|---|---|\n")
	for _, s := range sizes {
		topic := fmt.Sprintf("persistent://public/default/drain-%d-%d", s.size, time.Now().UnixNano())
		if err := backlog(*url, topic, s.size, s.count); err != nil {
			log.Fatal(err)
		}
		best := map[string][2]time.Duration{}
		var ratios, cpuRatios []float64 // bridge/official, each round's pair
		for r := range *rounds {
			// Each round swaps which client goes first: the broker warms up (its cache,
			// its JIT) over the rounds, and the second client of every round gained by it.
			order := []string{"bridge", "official"}
			if r%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			round := map[string][2]time.Duration{}
			for _, c := range order {
				sub := fmt.Sprintf("%s-%d", c, r)
				cpu0, t0 := harness.CPUTime(), time.Now()
				var err error
				if c == "bridge" {
					err = drainOurs(*url, topic, sub, s.count, opts)
				} else {
					err = drainOfficial(*url, topic, sub, s.count)
				}
				if err != nil {
					log.Fatalf("%s: %v", c, err)
				}
				el, cpu := time.Since(t0), harness.CPUTime()-cpu0
				round[c] = [2]time.Duration{el, cpu}
				if *each {
					fmt.Fprintf(os.Stderr, "round %d %s %d B: %.0f msgs/s, %.2f µs CPU/msg, load %s\n", r, c, s.size,
						float64(s.count)/el.Seconds(), float64(cpu.Microseconds())/float64(s.count), harness.LoadAvg())
				}
				if b, ok := best[c]; !ok || el < b[0] {
					best[c] = [2]time.Duration{el, cpu}
				}
			}
			b, o := round["bridge"], round["official"]
			ratios = append(ratios, o[0].Seconds()/b[0].Seconds())
			cpuRatios = append(cpuRatios, float64(b[1])/float64(o[1]))
		}
		for _, c := range []string{"bridge", "official"} {
			rate := float64(s.count) / best[c][0].Seconds()
			fmt.Printf("| %s | %d B | %d | %.0f | %.1f | %.2f |\n", c, s.size, s.count, rate, rate*float64(s.size)/1e6,
				float64(best[c][1].Microseconds())/float64(s.count))
		}
		if *admin != "" {
			deleteTopic(*admin, topic)
		}
		b, o := best["bridge"], best["official"]
		fmt.Printf("| ratio bridge/official | %d B | | %.2fx | | %.2fx |\n", s.size, o[0].Seconds()/b[0].Seconds(), float64(b[1])/float64(o[1]))
		// The best rounds of each client may come from different moments of a shared
		// machine; the median of each round's own pair is the steadier ratio.
		fmt.Printf("| median of the rounds' ratios | %d B | | %.2fx | | %.2fx |\n", s.size, median(ratios), median(cpuRatios))
	}
}

// deleteTopic deletes a backlog topic (and its subscriptions) through the admin API, so
// repeated runs do not fill a shared broker's disk; a failure is only reported.
func deleteTopic(admin, topic string) {
	path := strings.Replace(topic, "persistent://", "/admin/v2/persistent/", 1)
	req, err := http.NewRequest(http.MethodDelete, strings.TrimRight(admin, "/")+path+"?force=true", nil)
	if err != nil {
		log.Printf("deleting %s: %v", topic, err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Printf("deleting %s: %v", topic, err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Printf("deleting %s: %s", topic, resp.Status)
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// backlog publishes count messages of size bytes with the bridge's producer.
func backlog(url, topic string, size, count int) error {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	// Create the subscriptions first, so the backlog is kept for them.
	for r := range 8 {
		for _, name := range []string{"bridge", "official"} {
			cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: fmt.Sprintf("%s-%d", name, r)})
			if err != nil {
				return err
			}
			cons.Close()
		}
	}
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	payload := make([]byte, size)
	for range count {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, nil)
	}
	return p.Flush(ctx)
}

// drainOurs drains count messages with opts (its topic, subscription and position set
// here); with KeepMemoryCharge each message's charge is given back once it is
// acknowledged, as egress does once it has written it.
func drainOurs(url, topic, sub string, count int, opts pulsar.ConsumerOptions) error {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	opts.Topics, opts.Subscription, opts.InitialPosition = []string{topic}, sub, pulsar.Earliest
	cons, err := c.Subscribe(ctx, opts)
	if err != nil {
		return err
	}
	defer cons.Close()
	for range count {
		m, err := cons.Receive(ctx)
		if err != nil {
			return err
		}
		if err := cons.Ack(m); err != nil {
			return err
		}
		if opts.KeepMemoryCharge {
			cons.Settled(m)
		}
		// Done with its bytes, as an egress stream is once it wrote and settled a
		// message: its frame's buffer may be reused.
		m.Release()
	}
	return nil
}

func drainOfficial(url, topic, sub string, count int) error {
	c, err := official.NewClient(official.ClientOptions{URL: url, Logger: harness.QuietLogger()})
	if err != nil {
		return err
	}
	defer c.Close()
	cons, err := c.Subscribe(official.ConsumerOptions{Topic: topic, SubscriptionName: sub, SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		return err
	}
	defer cons.Close()
	ctx := context.Background()
	for range count {
		m, err := cons.Receive(ctx)
		if err != nil {
			return err
		}
		if err := cons.Ack(m); err != nil {
			return err
		}
	}
	return nil
}
