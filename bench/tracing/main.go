// Command tracing measures what tracing costs ingress: the same records POSTed through
// the bridge binary with tracing off, at 1 % sampling and at 100 % sampling (spans
// exported over OTLP/HTTP to a sink in this process that accepts and drops them),
// alternating in one run; best of the rounds for each.
//
//	go run ./tracing -url pulsar://127.0.0.1:6650 -bin ../bin/bridge -rounds 3
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	url := flag.String("url", os.Getenv("PULSAR_URL"), "broker URL")
	bin := flag.String("bin", "../bin/bridge", "the bridge binary (make build)")
	rounds := flag.Int("rounds", 3, "alternating rounds (the best of each is reported)")
	streams := flag.Int("streams", 100, "streams per run (sampling is decided per stream)")
	per := flag.Int("records", 1000, "records per stream")
	size := flag.Int("size", 1024, "record size")
	rate := flag.Int("rate", 0, "offered records per second per run (0: as fast as the bridge takes them)")
	flag.Parse()
	if *url == "" {
		log.Fatal("no broker: set -url or PULSAR_URL (make bench-tracing starts one)")
	}
	// The OTLP sink: counts export requests and their bytes.
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
	sink := "http://" + ln.Addr().String()
	modes := []struct {
		name string
		env  []string
	}{
		{"off", nil},
		{"1 %", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.01"}},
		{"100 %", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_TRACES_SAMPLER=parentbased_always_on"}},
	}
	cfg := fmt.Sprintf("pulsar:\n  url: %s\nroutes:\n  - name: bench\n    namespaces: [public/default]\n    default: {topic: \"{header:X-Topic}\"}\n", *url)
	type res struct {
		elapsed, cpu time.Duration
		exports      int64
	}
	best := map[string]res{}
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var body []byte
	for range *per {
		body = recordio.AppendRecord(body, payload)
	}
	for r := range *rounds {
		for _, m := range modes {
			br, err := harness.StartBridge(*bin, cfg, m.env...)
			if err != nil {
				log.Fatal(err)
			}
			topic := fmt.Sprintf("bench-tracing-%d-%d", r, time.Now().UnixNano())
			e0 := exports.Load()
			cpu0, t0 := br.CPU(), time.Now()
			for s := range *streams {
				var rd io.Reader = strings.NewReader(string(body))
				if *rate > 0 {
					rd = paced(body, *per, *rate)
				}
				req, _ := http.NewRequest(http.MethodPost, br.DataURL+"/v1/publish/bench", rd)
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
					log.Fatalf("%s stream %d: %d %s", m.name, s, resp.StatusCode, out)
				}
			}
			x := res{time.Since(t0), br.CPU() - cpu0, 0}
			br.Stop() // flushes the span exporter
			x.exports = exports.Load() - e0
			if b, ok := best[m.name]; !ok || x.elapsed < b.elapsed {
				best[m.name] = x
			}
		}
	}
	n := float64(*streams * *per)
	off := best["off"]
	if *rate > 0 {
		fmt.Printf("offered load: %d records/s\n\n", *rate)
	}
	fmt.Printf("| tracing | records | records/s | bridge CPU µs/record | throughput cost | OTLP exports |\n|---|---|---|---|---|---|\n")
	for _, m := range modes {
		x := best[m.name]
		fmt.Printf("| %s | %.0f | %.0f | %.2f | %+.1f %% | %d |\n", m.name, n, n/x.elapsed.Seconds(), float64(x.cpu.Nanoseconds())/1e3/n,
			(x.elapsed.Seconds()/off.elapsed.Seconds()-1)*100, x.exports)
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
