package harness

import (
	"flag"
	"log"
	"os"

	official "github.com/apache/pulsar-client-go/pulsar"
)

// BrokerFlag registers -url, the broker a benchmark runs against ($PULSAR_URL by default).
func BrokerFlag() *string { return flag.String("url", os.Getenv("PULSAR_URL"), "broker URL") }

// BinFlag registers -bin, the bridge binary a benchmark measures.
func BinFlag() *string { return flag.String("bin", "../bin/bridge", "the bridge binary (make build)") }

// RequireBroker ends the benchmark when url is empty, naming the make target that runs
// it with a broker of its own.
func RequireBroker(url, makeTarget string) {
	if url == "" {
		log.Fatalf("no broker: set -url or PULSAR_URL (make %s starts one)", makeTarget)
	}
}

// MustStartBridge is StartBridge for a benchmark's main: a bridge that does not start
// ends the benchmark.
func MustStartBridge(bin, cfg string, env ...string) *Bridge {
	br, err := StartBridge(bin, cfg, env...)
	if err != nil {
		log.Fatal(err)
	}
	return br
}

// MustOfficialClient is the official client of url, logging nothing, for a benchmark's
// main: a client that cannot be made ends the benchmark.
func MustOfficialClient(url string) official.Client {
	c, err := official.NewClient(official.ClientOptions{URL: url, Logger: QuietLogger()})
	if err != nil {
		log.Fatal(err)
	}
	return c
}
