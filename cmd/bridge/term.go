package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// isTerminal reports whether w is a terminal, so a progress line goes only where a
// person reads it, never into a file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	if os.Getenv("TERM") == "dumb" {
		return false
	}
	return isTTY(f.Fd())
}

// progress rewrites one status line on a terminal at most every interval; it writes
// nothing at all when it has no terminal. Clear wipes the line before the final report.
type progress struct {
	w        io.Writer // nil: not a terminal
	interval time.Duration
	mu       sync.Mutex
	last     time.Time
	shown    bool
}

func newProgress(w io.Writer) *progress {
	if !isTerminal(w) {
		return &progress{}
	}
	return &progress{w: w, interval: 200 * time.Millisecond}
}

// Show writes the line made by line if interval has passed since the last one.
func (p *progress) Show(line func() string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.last) >= p.interval {
		p.last = now
		p.shown = true
		fmt.Fprintf(p.w, "\r\x1b[K%s", line())
	}
}

// Print writes s to w (the terminal, or another writer) with the progress line wiped
// first, so a message never lands after a half-drawn line; the next Show redraws it.
func (p *progress) Print(w io.Writer, s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
	io.WriteString(w, s)
}

// Clear erases the progress line, so what is printed next starts on a clean line.
func (p *progress) Clear() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}
