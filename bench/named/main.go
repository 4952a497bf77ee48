// Command named measures what exactly-once ingress costs: the same 1 KiB records POSTed
// through the bridge binary as one RecordIO stream with a Stream-Name (published by a
// deduplicating producer with the stream's sequence numbers) and without one,
// alternating in one run on the same broker and a namespace with deduplication on. It
// prints a Markdown table (records/s and the bridge's CPU per record, best of the rounds).
//
//	go run ./named -url pulsar://127.0.0.1:6650 -admin http://127.0.0.1:8080 -bin ../bin/bridge
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/recordio-bridge/bridge/bench/internal/harness"
	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	url := harness.BrokerFlag()
	admin := flag.String("admin", os.Getenv("PULSAR_ADMIN_URL"), "broker admin URL (to turn deduplication on)")
	bin := harness.BinFlag()
	rounds := flag.Int("rounds", 5, "alternating rounds (the best of each path is reported)")
	n := flag.Int("n", 100_000, "records per run")
	size := flag.Int("size", 1024, "record size in bytes")
	flag.Parse()
	if *url == "" || *admin == "" {
		log.Fatal("no broker: set -url and -admin or PULSAR_URL and PULSAR_ADMIN_URL (make bench-named starts one)")
	}
	ns := fmt.Sprintf("public/bench-named-%d", time.Now().UnixNano())
	for _, call := range []struct{ method, path, body string }{
		{http.MethodPut, "/admin/v2/namespaces/" + ns, "{}"},
		{http.MethodPost, "/admin/v2/namespaces/" + ns + "/deduplication", "true"},
	} {
		req, _ := http.NewRequest(call.method, *admin+call.path, strings.NewReader(call.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			log.Fatalf("admin %s %s: %d %s", call.method, call.path, resp.StatusCode, b)
		}
	}
	br := harness.MustStartBridge(*bin, fmt.Sprintf(`pulsar:
  url: %s
routes:
  - name: bench
    namespaces: [%s]
    default: {topic: "%s/{header:X-Topic}"}
`, *url, ns, ns))
	defer br.Stop()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}

	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var body []byte
	for range *n {
		body = recordio.AppendRecord(body, payload)
	}
	type result struct{ elapsed, cpu time.Duration }
	best := map[bool]result{}
	for r := range *rounds {
		for _, named := range []bool{false, true} {
			req, _ := http.NewRequest(http.MethodPost, br.DataURL+"/v1/publish/bench", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/recordio")
			req.Header.Set("Message-Content-Type", "application/json")
			req.Header.Set("X-Topic", fmt.Sprintf("t-%v-%d", named, r))
			if named {
				req.Header.Set("Stream-Name", "bench-"+strconv.Itoa(r))
			}
			cpu0, t0 := br.CPU(), time.Now()
			resp, err := client.Do(req)
			if err != nil {
				log.Fatal(err)
			}
			out, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			res := result{time.Since(t0), br.CPU() - cpu0}
			if err != nil || resp.StatusCode != 200 || !strings.Contains(string(out), `"published":`+strconv.Itoa(*n)) {
				log.Fatalf("named=%v: %d %s %v", named, resp.StatusCode, out, err)
			}
			if named && !strings.Contains(string(out), `"duplicates":0`) {
				log.Fatalf("named: %s", out)
			}
			if b, ok := best[named]; !ok || res.elapsed < b.elapsed {
				best[named] = res
			}
		}
	}
	fmt.Printf("| ingress, %d B records | records/s | MB/s | bridge CPU µs/record |\n|---|---|---|---|\n", *size)
	for _, named := range []bool{false, true} {
		r := best[named]
		rate := float64(*n) / r.elapsed.Seconds()
		label := map[bool]string{false: "unnamed (at-least-once)", true: "named stream (exactly-once)"}[named]
		fmt.Printf("| %s | %.0f | %.1f | %.2f |\n", label, rate, rate*float64(*size)/1e6, float64(r.cpu.Nanoseconds())/1e3/float64(*n))
	}
	u, nm := best[false], best[true]
	fmt.Printf("| **named/unnamed** | **%.3fx** | | |\n", u.elapsed.Seconds()/nm.elapsed.Seconds())
}
