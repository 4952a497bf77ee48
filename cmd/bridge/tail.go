package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/recordio-bridge/bridge/client"
)

const tailUsage = `usage: bridge tail [flags] STREAM

Prints the records of the stream STREAM (GET /v1/streams/STREAM; a name starting with
/ is the stream's path) as they come, reconnecting when the response ends, until -n
records were printed, the topic ends, or Ctrl-C. Exit status: 0 ended so, 1 the stream
failed (refused, or a record that cannot be printed), 2 usage.

Flags:
`

// ackBatch is the most acknowledgements sent in one /ack: far below the bridge's 10 000,
// so a fast stream's acknowledgements go out steadily rather than in bursts.
const ackBatch = 1000

// tailCmd holds bridge tail's flags.
type tailCmd struct {
	conn         connFlags
	output       string
	n            int64
	ack          string
	position     string
	subscription string
	accept       string
}

func cmdTail(args []string, stdout, stderr io.Writer, getenv func(string) string, sigs <-chan os.Signal) int {
	var c tailCmd
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tailUsage); fs.PrintDefaults() }
	c.conn.register(fs)
	fs.StringVar(&c.output, "o", outputJSON, "json (a record a line: JSON as it is, other text as a JSON string), recordio (the records as RecordIO) or envelope (the JSON envelope of each message, a line each: asks for envelope=json)")
	fs.Int64Var(&c.n, "n", 0, "stop after this many records (0: until Ctrl-C or the end of the topic)")
	fs.StringVar(&c.ack, "ack", "", "client: acknowledge each record once it is printed (auto: the bridge does on writing it); default: the stream's setting")
	fs.StringVar(&c.position, "position", "", "where a new subscription starts (earliest or latest), as the stream allows")
	fs.StringVar(&c.subscription, "subscription", "", "the subscription to read on, as the stream allows")
	fs.StringVar(&c.accept, "accept", "", "the records' type to ask for (Message-Accept), e.g. application/json for a protobuf stream")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "bridge tail: "+format+"\n", a...)
		fmt.Fprintln(stderr, "usage: bridge tail [-url URL] [-o json|recordio|envelope] [-n N] [-ack client] [-position earliest|latest] STREAM")
		return exitUsage
	}
	if len(pos) != 1 {
		return usageErr("want one STREAM, got %d arguments", len(pos))
	}
	if c.n < 0 {
		return usageErr("-n %d is negative", c.n)
	}
	var ack client.AckMode
	switch c.ack {
	case "":
	case "client":
		ack = client.AckClient
	case "auto":
		ack = client.AckAuto
	default:
		return usageErr("-ack %q is not client or auto", c.ack)
	}
	if c.position != "" && c.position != "earliest" && c.position != "latest" {
		return usageErr("-position %q is not earliest or latest", c.position)
	}
	endpoint, err := c.conn.endpoint("streams", pos[0])
	if err != nil {
		return usageErr("%v", err)
	}
	out, err := newSink(c.output, stdout)
	if err != nil {
		return usageErr("%v", err)
	}
	tlsConf, err := c.conn.tlsConfig()
	if err != nil {
		return usageErr("%v", err)
	}
	tok, err := c.conn.token(getenv)
	if err != nil {
		return usageErr("%v", err)
	}
	opts := client.SubscriberOptions{
		URL:           endpoint,
		Subscription:  c.subscription,
		Position:      c.position,
		Ack:           ack,
		MessageAccept: c.accept,
		TLSConfig:     tlsConf,
		Token:         tok,
		Header:        c.conn.header.h,
		OnReconnect: func(cause error, wait time.Duration) {
			fmt.Fprintf(stderr, "bridge tail: %v; reconnecting in %v\n", cause, wait.Round(time.Millisecond))
		},
	}
	if c.output == outputEnvelope {
		opts.Envelope = "json"
	}
	sub, err := client.NewSubscriber(opts)
	if err != nil {
		return usageErr("%v", err)
	}
	t := &tailRun{sub: sub, out: out, stderr: stderr, limit: c.n, ack: ack == client.AckClient}
	return t.run(sigs)
}

// tailRun is one bridge tail: it prints what the Subscriber yields and, with -ack client,
// acknowledges what it printed once it was flushed.
type tailRun struct {
	sub     *client.Subscriber
	out     sink
	stderr  io.Writer
	limit   int64
	ack     bool
	printed int64
	pending []*client.Message // printed, not yet flushed and acknowledged
}

type next struct {
	m   *client.Message
	err error
}

func (t *tailRun) run(sigs <-chan os.Signal) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The pump lets the loop see that nothing is waiting, the moment to flush and
	// acknowledge: a terminal shows each record as it comes, a pipe gets full buffers.
	msgs := make(chan next)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		for {
			m, err := t.sub.Next(ctx)
			select {
			case msgs <- next{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-pumped
		t.sub.Close()
	}()

	for t.limit == 0 || t.printed < t.limit {
		var n next
		select {
		case <-sigs:
			return t.end()
		case n = <-msgs:
		default:
			if err := t.settle(); err != nil {
				return t.fail(err)
			}
			select {
			case n = <-msgs:
			case <-sigs:
				return t.end()
			}
		}
		if n.err != nil {
			if errors.Is(n.err, io.EOF) {
				return t.end() // the topic ended, everything delivered
			}
			if err := t.settle(); err != nil {
				return t.fail(err)
			}
			return t.fail(n.err)
		}
		if err := t.out.Write(n.m.Data); err != nil {
			if serr := t.settle(); serr != nil { // what was printed before it is still acknowledged
				return t.fail(serr)
			}
			return t.fail(fmt.Errorf("record at position %d of stream %s%s: %w", n.m.Position, n.m.StreamID, idNote(n.m), err))
		}
		t.printed++
		if t.ack {
			t.pending = append(t.pending, n.m)
			if len(t.pending) >= ackBatch {
				if err := t.settle(); err != nil {
					return t.fail(err)
				}
			}
		}
	}
	return t.end()
}

func idNote(m *client.Message) string {
	if m.ID == "" {
		return ""
	}
	return ", message " + m.ID
}

// settle flushes what was printed and acknowledges it: only what reached stdout is
// acknowledged.
func (t *tailRun) settle() error {
	if err := t.out.Flush(); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	if len(t.pending) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.sub.Ack(ctx, t.pending...)
	n := len(t.pending)
	clear(t.pending)
	t.pending = t.pending[:0]
	if errors.Is(err, client.ErrResponseEnded) {
		// Printed, not acknowledged: the bridge sends them again on the new response.
		fmt.Fprintf(t.stderr, "bridge tail: %d printed records were not acknowledged (their response ended) and will come again: %v\n", n, err)
		return nil
	}
	var ae *client.AckError
	if errors.As(err, &ae) {
		fmt.Fprintf(t.stderr, "bridge tail: %v\n", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("acknowledging %d printed records: %w", n, err)
	}
	return nil
}

// end settles what was printed and ends cleanly.
func (t *tailRun) end() int {
	if err := t.settle(); err != nil {
		return t.fail(err)
	}
	return exitOK
}

func (t *tailRun) fail(err error) int {
	_ = t.out.Flush()
	fmt.Fprintf(t.stderr, "bridge tail: %v\n", err)
	return exitRefused
}
