package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/recordio-bridge/bridge/client"
)

// Exit statuses of bridge publish and bridge tail (docs/cli.md).
const (
	exitOK          = 0   // everything published; tail: ended by -n, the end of the topic or Ctrl-C
	exitRefused     = 1   // publish: some records refused, each named, the rest published; tail: the stream failed
	exitUsage       = 2   // bad flags or arguments
	exitStopped     = 3   // publish: stopped before the end of the input (request refused as a whole, input unreadable)
	exitInterrupted = 130 // publish: interrupted (SIGINT/SIGTERM) before everything was published
)

const publishUsage = `usage: bridge publish [flags] ROUTE [FILE...]

Publishes records to the route ROUTE (POST /v1/publish/ROUTE; a name starting with /
is the route's path) from the FILEs, or stdin without any ("-" is stdin too), and
prints what became of them. Exit status: 0 every record published, 1 some refused
(each named with its line or record number), 2 usage, 3 stopped before the end,
130 interrupted.

Flags:
`

// publishCmd holds bridge publish's flags.
type publishCmd struct {
	conn        connFlags
	format      string
	contentType string
	streamName  string
	sequence    uint64
	receipts    bool
}

func cmdPublish(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, sigs <-chan os.Signal) int {
	var c publishCmd
	fs := newCommandFlags("publish", publishUsage, &c.conn, stderr, getenv)
	fs.StringVar(&c.format, "format", formatJSON, "json (JSON lines, one record a line), recordio (a RecordIO stream) or raw (each FILE one record)")
	fs.StringVar(&c.contentType, "content-type", "application/json", "the records' type (Message-Content-Type), one the route accepts")
	fs.StringVar(&c.streamName, "stream-name", "", "publish exactly once as this named stream (1 to 128 of A-Za-z0-9._-; the namespace needs deduplication)")
	fs.Uint64Var(&c.sequence, "sequence", 0, "with -stream-name: the first record's number; each next record has the next")
	fs.BoolVar(&c.receipts, "receipts", false, "print each record's receipt on stdout as a JSON line")
	pos, exit, ok := parseCommandFlags(fs, args)
	if !ok {
		return exit
	}
	usageErr := usageError(stderr, "publish", "usage: bridge publish [-url URL] [-format json|recordio|raw] [-stream-name NAME [-sequence N]] ROUTE [FILE...]")
	if len(pos) < 1 {
		return usageErr("no ROUTE")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["sequence"] && c.streamName == "" {
		return usageErr("-sequence %d needs -stream-name: without a name the bridge keeps no numbers", c.sequence)
	}
	endpoint, err := c.conn.endpoint("publish", pos[0])
	if err != nil {
		return usageErr("%v", err)
	}
	files := pos[1:]
	if c.format == formatRaw && len(files) == 0 {
		files = []string{"-"}
	}
	src, err := newSource(c.format, inputs(files, stdin))
	if err != nil {
		return usageErr("%v", err)
	}
	tlsConf, tok, err := c.conn.credentials(getenv)
	if err != nil {
		return usageErr("%v", err)
	}
	run := &publishRun{
		stdout:   stdout,
		progress: newProgress(stderr),
		stderr:   stderr,
		where:    map[uint64]string{},
		receipts: c.receipts,
	}
	pub, err := client.NewPublisher(client.PublisherOptions{
		URL:           endpoint,
		ContentType:   c.contentType,
		StreamName:    c.streamName,
		FirstSequence: c.sequence,
		OnReceipt:     run.onReceipt,
		OnRetry:       run.onRetry,
		TLSConfig:     tlsConf,
		Token:         tok,
		Header:        c.conn.header.h,
	})
	if err != nil {
		return usageErr("%v", err)
	}
	return run.run(pub, src, c.sequence, c.streamName != "", sigs)
}

// publishRun is one bridge publish: it feeds the input to the Publisher and reports each
// outcome by the record's place in the input.
type publishRun struct {
	stdout, stderr io.Writer
	progress       *progress
	receipts       bool

	mu    sync.Mutex
	where map[uint64]string // sequence -> place in the input, until its outcome comes

	read, invalid, persisted, duplicates, refused atomic.Uint64
}

// say prints a line on stderr, clearing the progress line first.
func (r *publishRun) say(format string, a ...any) {
	r.progress.Print(r.stderr, fmt.Sprintf(format+"\n", a...))
}

func (r *publishRun) onReceipt(rc client.Receipt) {
	r.mu.Lock()
	where := r.where[rc.Sequence]
	delete(r.where, rc.Sequence)
	r.mu.Unlock()
	switch rc.Outcome {
	case client.Persisted:
		r.persisted.Add(1)
	case client.Duplicate:
		r.duplicates.Add(1)
	case client.Refused:
		r.refused.Add(1)
		var re *client.RecordError
		if errors.As(rc.Err, &re) {
			r.say("%s: refused (%d): %s", where, re.Status, re.Message)
		} else {
			r.say("%s: refused: %v", where, rc.Err)
		}
	}
	if r.receipts {
		r.printReceipt(where, rc)
	}
}

// receiptLine is a receipt as -receipts prints it.
type receiptLine struct {
	Record    string `json:"record"`
	Sequence  uint64 `json:"sequence"`
	Status    int    `json:"status"`
	Outcome   string `json:"outcome"`
	Topic     string `json:"topic,omitempty"`
	MessageID string `json:"messageId,omitempty"`
	Error     string `json:"error,omitempty"`
}

func (r *publishRun) printReceipt(where string, rc client.Receipt) {
	l := receiptLine{Record: where, Sequence: rc.Sequence, Status: rc.Status, Outcome: rc.Outcome.String(), Topic: rc.Topic, MessageID: rc.MessageID}
	var re *client.RecordError
	if errors.As(rc.Err, &re) {
		l.Error = re.Message
	}
	b, _ := json.Marshal(l)
	r.progress.Print(r.stdout, string(append(b, '\n')))
}

func (r *publishRun) onRetry(next uint64, cause error, wait time.Duration) {
	r.mu.Lock()
	where := r.where[next]
	r.mu.Unlock()
	if where == "" {
		where = "record " + strconv.FormatUint(next, 10)
	}
	r.say("bridge publish: %v; sending again from %s in %v", cause, where, wait.Round(time.Millisecond))
}

func (r *publishRun) status() string {
	return fmt.Sprintf("%d read, %d published, %d refused", r.read.Load(), r.persisted.Load()+r.duplicates.Load(), r.refused.Load()+r.invalid.Load())
}

// run publishes src through pub until the input ends, the Publisher stops for good or a
// signal comes: the first SIGINT or SIGTERM stops reading and waits for the outcomes of
// what was sent, a second one gives up on them.
func (r *publishRun) run(pub *client.Publisher, src source, first uint64, named bool, sigs <-chan os.Signal) int {
	readCtx, stopReading := context.WithCancel(context.Background())
	defer stopReading()
	closeCtx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	var interrupted atomic.Bool
	sigDone := make(chan struct{})
	defer close(sigDone)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-sigs:
			case <-sigDone:
				return
			}
			interrupted.Store(true)
			if n == 0 {
				r.say("bridge publish: interrupted: waiting for the receipts of what was sent (again to give up on them)")
				stopReading()
			} else {
				giveUp()
			}
		}
	}()
	tickDone := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-tickDone:
				return
			case <-t.C:
				if time.Since(start) > time.Second { // a short input shows no progress at all
					r.progress.Show(r.status)
				}
				if pub.Err() != nil {
					// Stopped for good (the route is gone, the stream taken over): say so
					// now, not when the next line of a quiet input comes.
					stopReading()
				}
			}
		}
	})

	// The input is read on a goroutine of its own, so a signal is seen while a read
	// waits (stdin from a terminal or a pipe that is quiet); the loop hands each record
	// back before the next is read, since the source reuses its buffer.
	type read struct {
		rec inputRecord
		err error
	}
	reads, more, readerDone := make(chan read), make(chan struct{}), make(chan struct{})
	defer close(readerDone)
	go func() {
		for {
			rec, err := src.Next()
			select {
			case reads <- read{rec, err}:
			case <-readerDone:
				return
			}
			if err != nil {
				return
			}
			select {
			case <-more:
			case <-readerDone:
				return
			}
		}
	}()

	next := first
	var stopped error // why the input was not read to its end
loop:
	for {
		var rd read
		select {
		case rd = <-reads:
		case <-readCtx.Done():
			break loop
		}
		if rd.err == io.EOF {
			break
		}
		if rd.err != nil {
			stopped = rd.err
			break
		}
		rec := rd.rec
		r.read.Add(1)
		if rec.bad != nil {
			r.invalid.Add(1)
			r.say("%s: not published: %v", rec.where, rec.bad)
			more <- struct{}{}
			continue
		}
		r.mu.Lock()
		r.where[next] = rec.where
		r.mu.Unlock()
		seq, err := pub.Publish(readCtx, rec.data)
		if err != nil {
			r.mu.Lock()
			delete(r.where, next)
			r.mu.Unlock()
			if readCtx.Err() == nil {
				stopped = err
			}
			break
		}
		if seq != next { // the Publisher numbers in Publish's order, and only this loop publishes
			panic(fmt.Sprintf("bridge publish: record numbered %d, expected %d", seq, next))
		}
		next++
		more <- struct{}{}
	}
	closeErr := pub.Close(closeCtx)
	close(tickDone)
	ticker.Wait()
	r.progress.Clear()
	if stopped == nil && closeErr != nil && !errors.Is(closeErr, context.Canceled) {
		stopped = closeErr
	}

	published := r.persisted.Load() + r.duplicates.Load()
	refused := r.refused.Load() + r.invalid.Load()
	unanswered := next - first - published - r.refused.Load()
	line := fmt.Sprintf("bridge publish: %d records: %d published (%d duplicates), %d refused", r.read.Load(), published, r.duplicates.Load(), refused)
	if unanswered > 0 {
		line += fmt.Sprintf(", %d without an answer", unanswered)
	}
	if named {
		line += fmt.Sprintf("; next sequence %d", pub.NextSequence())
	}
	fmt.Fprintln(r.stdoutOrErr(), line)
	switch {
	case stopped != nil:
		r.say("bridge publish: stopped: %v", stopped)
		return exitStopped
	case interrupted.Load():
		if named {
			r.say("bridge publish: interrupted; to go on, publish the rest with -stream-name and -sequence %d", pub.NextSequence())
		}
		return exitInterrupted
	case refused > 0 || unanswered > 0:
		return exitRefused
	}
	return exitOK
}

// stdoutOrErr is where the summary goes: stdout, or stderr when stdout carries the
// receipts as JSON lines, which it would break.
func (r *publishRun) stdoutOrErr() io.Writer {
	if r.receipts {
		return r.stderr
	}
	return r.stdout
}
