// Command demo streams Mesos-style scheduler events through a running bridge and shows
// them arriving in Pulsar, read back with the official Go client. e2e/demo.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"

	"github.com/recordio-bridge/bridge/recordio"
)

func main() {
	bridge := flag.String("bridge", "http://127.0.0.1:8080", "the bridge's data listener")
	pulsarURL := flag.String("pulsar", "pulsar://127.0.0.1:6650", "the broker")
	prefix := flag.String("topics", "persistent://public/default/demo", "topic prefix the demo route writes to")
	n := flag.Int("n", 12, "events to stream")
	flag.Parse()
	if err := run(*bridge, *pulsarURL, *prefix, *n); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

var types = []string{"SUBSCRIBED", "OFFERS", "UPDATE", "HEARTBEAT", "UPDATE", "OFFERS", "FAILURE", "UPDATE", "HEARTBEAT", "RESCIND", "UPDATE", "HEARTBEAT"}

func event(i int) string {
	typ := types[i%len(types)]
	task := fmt.Sprintf("task-%d", i%3)
	switch typ {
	case "SUBSCRIBED":
		return `{"type":"SUBSCRIBED","subscribed":{"framework_id":{"value":"fw-demo"},"heartbeat_interval_seconds":15}}`
	case "OFFERS":
		return fmt.Sprintf(`{"type":"OFFERS","offers":{"offers":[{"id":{"value":"offer-%d"},"agent_id":{"value":"agent-1"},"hostname":"node-1"}]}}`, i)
	case "UPDATE":
		return fmt.Sprintf(`{"type":"UPDATE","update":{"status":{"task_id":{"value":%q},"state":"TASK_RUNNING","agent_id":{"value":"agent-1"}}}}`, task)
	case "FAILURE":
		return `{"type":"FAILURE","failure":{"agent_id":{"value":"agent-1"},"status":137}}`
	case "RESCIND":
		return fmt.Sprintf(`{"type":"RESCIND","rescind":{"offer_id":{"value":"offer-%d"}}}`, i-8)
	}
	return `{"type":"HEARTBEAT"}`
}

func run(bridge, pulsarURL, prefix string, n int) error {
	fmt.Printf("== POST %s/v1/publish/mesos: %d events as one RecordIO stream, receipts streamed back\n", bridge, n)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, bridge+"/v1/publish/mesos", pr)
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", "application/json")
	req.Header.Set("X-Framework-Id", "fw-demo")
	go func() {
		for i := range n {
			e := event(i)
			fmt.Printf("  -> %s\n", e)
			if _, err := pw.Write(recordio.AppendRecord(nil, []byte(e))); err != nil {
				return
			}
			time.Sleep(150 * time.Millisecond) // a scheduler's pace, so receipts interleave
		}
		pw.Close()
	}()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	rd := recordio.NewReader(resp.Body)
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		fmt.Printf("  <- %s\n", rec)
	}

	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	c, err := official.NewClient(official.ClientOptions{URL: pulsarURL, Logger: log.NewLoggerWithLogrus(l)})
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println()
	fmt.Println("== read back from Pulsar with the official Go client")
	for _, suffix := range []string{"tasks", "heartbeats", "events"} {
		topic := prefix + "-" + suffix
		cons, err := c.Subscribe(official.ConsumerOptions{Topic: topic, SubscriptionName: "demo",
			SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
		if err != nil {
			return err
		}
		fmt.Println(topic)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			msg, err := cons.Receive(ctx)
			cancel()
			if err != nil {
				break
			}
			var props []string
			for k, v := range msg.Properties() {
				props = append(props, k+"="+v)
			}
			sort.Strings(props)
			fmt.Printf("  %-12s key=%-8q props=[%s] %s\n", msg.ID().String(), msg.Key(), strings.Join(props, " "), msg.Payload())
			_ = cons.Ack(msg)
		}
		cons.Close()
	}
	return nil
}
