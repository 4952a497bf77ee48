// Command latency measures how long a record waits for its receipt when records come
// one at a time, as a scheduler posts events and waits on each: open loop (each record
// is due at its own time, whatever the answers before it did) at fixed rates, one
// record per write, through three paths in the same run, in turn at every rate:
//
//   - bridge: one HTTP/1.1 POST of a RecordIO stream to the bridge binary, one chunk per
//     record, receipts streamed back (Accept: application/recordio);
//   - websocket: Pulsar's own WebSocket producer (/ws/v2/producer/..., the broker's web
//     port with webSocketServiceEnabled=true), one JSON message per record, answered by
//     the broker with one JSON message each;
//   - official: pulsar-client-go's SendAsync with its defaults (10 ms batching delay).
//
// A record's latency is the time from when it was due (not when the sender got to it,
// so a stalled sender counts against the path, as HdrHistogram's corrected mode does)
// to its receipt. Percentiles are exact: the samples are sorted. The sender sleeps until
// a record is due; Go's timers wake it about once a millisecond at the earliest, so at
// 5 000/s records leave in small bursts and wait up to a millisecond, alike on every path.
//
//	go run ./latency -url pulsar://127.0.0.1:6650 -web http://127.0.0.1:8080 -bin ../bin/bridge
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"golang.org/x/net/websocket"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	url := harness.BrokerFlag()
	web := flag.String("web", os.Getenv("PULSAR_ADMIN_URL"), "the broker's web service URL (its WebSocket producer)")
	bin := harness.BinFlag()
	altBin := flag.String("alt-bin", "", "another bridge binary measured in the same run as path bridge-alt (a before/after comparison)")
	ratesFlag := flag.String("rates", "100,1000,5000", "records per second")
	dur := flag.Duration("duration", 20*time.Second, "measured time per path and rate and round")
	warm := flag.Duration("warmup", 2*time.Second, "unmeasured lead at the same rate before each measurement")
	size := flag.Int("size", 1024, "record size in bytes")
	rounds := flag.Int("rounds", 1, "rounds; each path's samples of all rounds are pooled")
	pathsFlag := flag.String("paths", "bridge,websocket,official", "paths to measure within a rate; each round starts one path further along the list, so no path is always the first measured")
	gcEnv := flag.Bool("gctrace", false, "run the bridge with GODEBUG=gctrace=1 (its GC lines go to stderr)")
	flag.Parse()
	harness.RequireBroker(*url, "bench-latency")
	paths := strings.Split(*pathsFlag, ",")
	bridges := map[string]*harness.Bridge{}
	for _, p := range paths {
		b := *bin
		switch p {
		case "bridge":
		case "bridge-alt":
			b = *altBin
		case "websocket":
			if *web == "" {
				log.Fatal("the websocket path needs -web or PULSAR_ADMIN_URL")
			}
			continue
		case "official":
			continue
		default:
			log.Fatalf("-paths: unknown path %q", p)
		}
		var env []string
		if *gcEnv {
			env = append(env, "GODEBUG=gctrace=1")
		}
		br, err := harness.StartBridge(b, fmt.Sprintf(`pulsar:
  url: %s
ingress:
  idleTimeout: 10m
routes:
  - name: bench
    namespaces: [public/default]
    default: {topic: "{header:X-Topic}"}
`, *url), env...)
		if err != nil {
			log.Fatalf("%s: %v", p, err)
		}
		defer br.Stop()
		bridges[p] = br
	}
	var rates []int
	for _, f := range strings.Split(*ratesFlag, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r <= 0 {
			log.Fatalf("-rates: %q is not a positive number", f)
		}
		rates = append(rates, r)
	}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}

	stages := map[string]map[int]histograms{} // the bridges' own stage histograms, by path and rate
	samples := map[string]map[int][]time.Duration{}
	for _, p := range paths {
		samples[p] = map[int][]time.Duration{}
	}
	for round := range *rounds {
		for _, rate := range rates {
			for i := range paths {
				p := paths[(i+round)%len(paths)]
				topic := fmt.Sprintf("bench-latency-%s-%d-%d-%d", p, rate, round, time.Now().UnixNano())
				warmN := int(warm.Seconds() * float64(rate))
				n := warmN + int(dur.Seconds()*float64(rate))
				var lat []time.Duration
				var err error
				switch p {
				case "bridge", "bridge-alt":
					before, _ := scrapeStages(bridges[p].OpsURL)
					lat, err = runBridge(bridges[p], topic, payload, rate, n)
					if after, serr := scrapeStages(bridges[p].OpsURL); serr == nil && before != nil {
						if stages[p] == nil {
							stages[p] = map[int]histograms{}
						}
						stages[p][rate] = add(stages[p][rate], after.since(before))
					}
				case "websocket":
					lat, err = runWebSocket(*web, topic, payload, rate, n)
				case "official":
					lat, err = runOfficial(*url, "persistent://public/default/"+topic, payload, rate, n)
				}
				if err != nil {
					log.Fatalf("%s at %d/s: %v", p, rate, err)
				}
				lat = lat[warmN:]
				samples[p][rate] = append(samples[p][rate], lat...)
				fmt.Fprintf(os.Stderr, "round %d %s %d/s: %s\n", round, p, rate, summarize(lat))
			}
		}
	}

	fmt.Printf("| path | rate | records | p50 | p90 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|---|\n")
	for _, rate := range rates {
		for _, p := range paths {
			s := samples[p][rate]
			slices.Sort(s)
			fmt.Printf("| %s | %d/s | %d | %s | %s | %s | %s | %s |\n", p, rate, len(s),
				ms(pct(s, 50)), ms(pct(s, 90)), ms(pct(s, 99)), ms(pct(s, 99.9)), ms(s[len(s)-1]))
		}
		if ws, ok := samples["websocket"][rate]; ok {
			for _, p := range paths {
				if !strings.HasPrefix(p, "bridge") {
					continue
				}
				b := samples[p][rate]
				fmt.Printf("| %s - websocket | %d/s | | %+.2f ms | | | %.2fx | |\n", p, rate,
					float64(pct(b, 50)-pct(ws, 50))/1e6, float64(pct(b, 99.9))/float64(pct(ws, 99.9)))
			}
		}
	}
	for _, rate := range rates {
		for _, p := range paths {
			if h := stages[p][rate]; h != nil {
				fmt.Println()
				printStages(fmt.Sprintf("%s at %d/s:", p, rate), h)
			}
		}
	}
}

// add sums two stage histograms (the rounds'); a may be nil.
func add(a, b histograms) histograms {
	if a == nil {
		return b
	}
	for st, bs := range b {
		if a[st] == nil {
			a[st] = map[float64]float64{}
		}
		for le, n := range bs {
			a[st][le] += n
		}
	}
	return a
}

// pct is the p-th percentile of sorted s: the smallest sample at least p % of the
// samples are at or below.
func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func summarize(lat []time.Duration) string {
	s := slices.Clone(lat)
	slices.Sort(s)
	return fmt.Sprintf("n=%d p50 %s p99 %s p99.9 %s max %s", len(s), ms(pct(s, 50)), ms(pct(s, 99)), ms(pct(s, 99.9)), ms(s[len(s)-1]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// pace calls send(i) for i from 0 to n-1, each when it is due (start + i/rate), and
// returns the due times. It sleeps between records and sends every record already due
// after a sleep that overran, so it never falls behind for good.
func pace(rate, n int, send func(i int) error) ([]time.Time, error) {
	due := make([]time.Time, n)
	start := time.Now().Add(10 * time.Millisecond)
	for i := range due {
		due[i] = start.Add(time.Duration(float64(i) * float64(time.Second) / float64(rate)))
	}
	for i := range n {
		if d := time.Until(due[i]); d > 0 {
			time.Sleep(d)
		}
		if err := send(i); err != nil {
			return due, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return due, nil
}

// received collects receipt times by record index, from any goroutine.
type received struct {
	mu   sync.Mutex
	at   []time.Time
	left int
	done chan struct{}
}

func newReceived(n int) *received {
	return &received{at: make([]time.Time, n), left: n, done: make(chan struct{})}
}

func (r *received) mark(i int, t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 0 || i >= len(r.at) || !r.at[i].IsZero() {
		return fmt.Errorf("receipt for record %d unexpected", i)
	}
	r.at[i] = t
	if r.left--; r.left == 0 {
		close(r.done)
	}
	return nil
}

func (r *received) wait(d time.Duration) error {
	select {
	case <-r.done:
		return nil
	case <-time.After(d):
		r.mu.Lock()
		defer r.mu.Unlock()
		return fmt.Errorf("%d receipts missing after %s", r.left, d)
	}
}

func latencies(due, at []time.Time) []time.Duration {
	out := make([]time.Duration, len(due))
	for i := range due {
		out[i] = at[i].Sub(due[i])
	}
	return out
}

var httpClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// runBridge posts one stream and writes each record as its own chunk (the transport
// flushes every chunk of a body of unknown length); receipts are read as they come.
func runBridge(b *harness.Bridge, topic string, payload []byte, rate, n int) ([]time.Duration, error) {
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, b.DataURL+"/v1/publish/bench", pr)
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("X-Topic", topic)
	type answer struct {
		resp *http.Response
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := httpClient.Do(req)
		answered <- answer{resp, err}
	}()
	rec := recordio.AppendRecord(nil, payload)
	got := newReceived(n)
	readErr := make(chan error, 1)
	var due []time.Time
	var sendErr error
	// The response starts (200, then receipts) only once the first chunk is read: the
	// sending starts at once.
	go func() {
		a := <-answered
		if a.err != nil {
			readErr <- a.err
			return
		}
		defer a.resp.Body.Close()
		if a.resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(a.resp.Body)
			readErr <- fmt.Errorf("bridge answered %d: %s", a.resp.StatusCode, body)
			return
		}
		rd := recordio.NewReader(a.resp.Body)
		var r struct {
			Seq     *int `json:"seq"`
			Status  int  `json:"status"`
			Summary bool `json:"summary"`
		}
		for {
			b, err := rd.Next()
			now := time.Now()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readErr <- err
				return
			}
			r.Seq, r.Summary = nil, false
			if err := json.Unmarshal(b, &r); err != nil {
				readErr <- err
				return
			}
			if r.Summary {
				continue
			}
			if r.Seq == nil || r.Status != http.StatusOK {
				readErr <- fmt.Errorf("receipt %s", b)
				return
			}
			if err := got.mark(*r.Seq, now); err != nil {
				readErr <- err
				return
			}
		}
	}()
	due, sendErr = pace(rate, n, func(int) error {
		_, err := pw.Write(rec)
		return err
	})
	if sendErr != nil {
		pw.CloseWithError(sendErr)
		return nil, sendErr
	}
	waitErr := got.wait(30 * time.Second)
	pw.Close()
	if err := <-readErr; err != nil {
		return nil, err
	}
	if waitErr != nil {
		return nil, waitErr
	}
	return latencies(due, got.at), nil
}

// runWebSocket produces through the broker's WebSocket producer; each message's context
// is its index, echoed in its answer.
func runWebSocket(web, topic string, payload []byte, rate, n int) ([]time.Duration, error) {
	u := strings.Replace(strings.Replace(strings.TrimRight(web, "/"), "https://", "wss://", 1), "http://", "ws://", 1)
	ws, err := websocket.Dial(u+"/ws/v2/producer/persistent/public/default/"+topic, "", web)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	got := newReceived(n)
	readErr := make(chan error, 1)
	go func() {
		var a struct {
			Result  string `json:"result"`
			Context string `json:"context"`
			ErrMsg  string `json:"errorMsg"`
		}
		for range n {
			var b []byte
			if err := websocket.Message.Receive(ws, &b); err != nil {
				readErr <- err
				return
			}
			now := time.Now()
			a.Result, a.Context, a.ErrMsg = "", "", ""
			if err := json.Unmarshal(b, &a); err != nil {
				readErr <- err
				return
			}
			i, err := strconv.Atoi(a.Context)
			if a.Result != "ok" || err != nil {
				readErr <- fmt.Errorf("answer %s", b)
				return
			}
			if err := got.mark(i, now); err != nil {
				readErr <- err
				return
			}
		}
		readErr <- nil
	}()
	b64 := base64.StdEncoding.EncodeToString(payload)
	due, err := pace(rate, n, func(i int) error {
		return websocket.Message.Send(ws, `{"payload":"`+b64+`","context":"`+strconv.Itoa(i)+`"}`)
	})
	if err != nil {
		return nil, err
	}
	if err := got.wait(30 * time.Second); err != nil {
		return nil, err
	}
	if err := <-readErr; err != nil {
		return nil, err
	}
	return latencies(due, got.at), nil
}

func runOfficial(url, topic string, payload []byte, rate, n int) ([]time.Duration, error) {
	c, err := official.NewClient(official.ClientOptions{URL: url, Logger: harness.QuietLogger()})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	got := newReceived(n)
	var mu sync.Mutex
	var firstErr error
	due, err := pace(rate, n, func(i int) error {
		p.SendAsync(context.Background(), &official.ProducerMessage{Payload: payload}, func(_ official.MessageID, _ *official.ProducerMessage, err error) {
			now := time.Now()
			if err == nil {
				err = got.mark(i, now)
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := got.wait(30 * time.Second); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return latencies(due, got.at), firstErr
}
