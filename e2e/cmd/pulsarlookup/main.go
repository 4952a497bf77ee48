// Command pulsarlookup tells whether a Pulsar service URL serves clients: through it, it
// asks for a topic's partitions, looks the topic up and attaches a reader on the broker
// that owns it, all within -timeout, as the official Go client does. It exits 0 when all of
// that worked and 1 with the reason otherwise.
//
// e2e/pulsar/cluster.sh runs it to decide that a (re)started Pulsar proxy is ready: an
// open TCP port says only that the process has bound it, not that it can reach the
// metadata store and the brokers.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

func main() {
	url := flag.String("url", "", "the service URL (pulsar://host:port)")
	tokenFile := flag.String("token-file", "", "a file holding the token to authenticate with (none: no authentication)")
	topic := flag.String("topic", "persistent://public/default/cluster-lookup", "the topic to look up (created if the broker auto-creates topics)")
	timeout := flag.Duration("timeout", 20*time.Second, "the deadline for the whole check")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "pulsarlookup: -url is required")
		os.Exit(2)
	}
	done := make(chan error, 1)
	go func() { done <- check(*url, *tokenFile, *topic, *timeout) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(*timeout + 5*time.Second): // the client's own timeouts should have ended it by now
		err = fmt.Errorf("no answer within %s", *timeout+5*time.Second)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pulsarlookup: %s via %s: %v\n", *topic, *url, err)
		os.Exit(1)
	}
	fmt.Printf("pulsarlookup: %s served via %s\n", *topic, *url)
}

func check(url, tokenFile, topic string, timeout time.Duration) error {
	opts := official.ClientOptions{URL: url, ConnectionTimeout: timeout / 2, OperationTimeout: timeout / 2, Logger: quietLogger()}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return errors.New("empty token file " + tokenFile)
		}
		opts.Authentication = official.NewAuthenticationToken(tok)
	}
	cl, err := official.NewClient(opts)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	if _, err := cl.TopicPartitions(topic); err != nil {
		return fmt.Errorf("partitioned metadata: %w", err)
	}
	rd, err := cl.CreateReader(official.ReaderOptions{Topic: topic, StartMessageID: official.LatestMessageID()})
	if err != nil {
		return fmt.Errorf("lookup and reader: %w", err)
	}
	rd.Close()
	return nil
}

// quietLogger keeps the client's errors only (on stderr).
func quietLogger() log.Logger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	return log.NewLoggerWithLogrus(l)
}
