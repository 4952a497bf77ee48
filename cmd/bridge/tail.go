package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
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
	fs := newCommandFlags("tail", tailUsage, &c.conn, stderr, getenv)
	fs.StringVar(&c.output, "o", outputJSON, "json (a record a line: JSON as it is, other text as a JSON string), recordio (the records as RecordIO) or envelope (the JSON envelope of each message, a line each: asks for envelope=json)")
	fs.Int64Var(&c.n, "n", 0, "stop after this many records (0: until Ctrl-C or the end of the topic)")
	fs.StringVar(&c.ack, "ack", "", "client: acknowledge each record once it is printed (auto: the bridge does on writing it); default: the stream's setting")
	fs.StringVar(&c.position, "position", "", "where a new subscription starts (earliest or latest), as the stream allows")
	fs.StringVar(&c.subscription, "subscription", "", "the subscription to read on, as the stream allows")
	fs.StringVar(&c.accept, "accept", "", "the records' type to ask for (Message-Accept), e.g. application/json for a protobuf stream")
	pos, exit, ok := parseCommandFlags(fs, args)
	if !ok {
		return exit
	}
	usageErr := usageError(stderr, "tail", "usage: bridge tail [-url URL] [-o json|recordio|envelope] [-n N] [-ack client] [-position earliest|latest] STREAM")
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
	tlsConf, tok, err := c.conn.credentials(getenv)
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
	pending []*client.Message // printed, not yet handed to the acknowledger

	acks      chan []*client.Message // to the acknowledger; nil until the first
	acked     chan struct{}          // closed when the acknowledger has ended
	ackMu     sync.Mutex
	ackFailed error // why acknowledging failed for good
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

// settle flushes what was printed and hands it to the acknowledger: only what reached
// stdout is acknowledged. It does not wait for the acknowledgement, so printing goes on
// meanwhile, and what is printed while one is on its way goes in the next (at most
// ackBatch records wait so).
func (t *tailRun) settle() error {
	if err := t.out.Flush(); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	if err := t.ackErr(); err != nil {
		return err
	}
	if len(t.pending) == 0 {
		return nil
	}
	if t.acks == nil {
		t.startAcker()
	}
	if len(t.pending) < ackBatch {
		select {
		case t.acks <- t.pending:
			t.pending = nil
		default: // one is on its way and one waits: this one grows
		}
		return nil
	}
	t.acks <- t.pending
	t.pending = nil
	return nil
}

// startAcker starts the goroutine that acknowledges what settle hands it, in order.
func (t *tailRun) startAcker() {
	t.acks, t.acked = make(chan []*client.Message, 1), make(chan struct{})
	go func() {
		defer close(t.acked)
		for batch := range t.acks {
			if err := t.ackNow(batch); err != nil {
				t.ackMu.Lock()
				t.ackFailed = err
				t.ackMu.Unlock()
				for range t.acks { // nothing more is acknowledged; let settle go on to see the error
				}
				return
			}
		}
	}()
}

// ackNow acknowledges batch. A record whose response ended (it comes again) or that the
// stream no longer holds is reported and passed over; any other failure ends tail.
func (t *tailRun) ackNow(batch []*client.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.sub.Ack(ctx, batch...)
	var ae *client.AckError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrResponseEnded):
		fmt.Fprintf(t.stderr, "bridge tail: printed records were not acknowledged (their response ended) and will come again: %v\n", err)
		return nil
	case errors.As(err, &ae):
		fmt.Fprintf(t.stderr, "bridge tail: %v\n", err)
		return nil
	}
	return fmt.Errorf("acknowledging %d printed records: %w", len(batch), err)
}

func (t *tailRun) ackErr() error {
	t.ackMu.Lock()
	defer t.ackMu.Unlock()
	return t.ackFailed
}

// finishAcks hands over what is left and waits until every acknowledgement was answered.
func (t *tailRun) finishAcks() error {
	if t.acks == nil {
		return nil
	}
	if len(t.pending) > 0 && t.ackErr() == nil {
		t.acks <- t.pending
		t.pending = nil
	}
	close(t.acks)
	<-t.acked
	t.acks = nil
	return t.ackErr()
}

// end settles what was printed and ends cleanly once it is acknowledged.
func (t *tailRun) end() int {
	if err := t.settle(); err != nil {
		return t.fail(err)
	}
	if err := t.finishAcks(); err != nil {
		return t.fail(err)
	}
	return exitOK
}

func (t *tailRun) fail(err error) int {
	_ = t.out.Flush()
	_ = t.finishAcks()
	fmt.Fprintf(t.stderr, "bridge tail: %v\n", err)
	return exitRefused
}
