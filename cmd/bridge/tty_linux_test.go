package main

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo-terminal pair: what is written to the terminal end (a terminal
// as a person's shell has one) is read from the controlling end.
func openPTY(t *testing.T) (ctl, term *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ctl.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ctl.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlocking the pseudo-terminal: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ctl.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("naming the pseudo-terminal: %v", e)
	}
	term, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return ctl, term
}

// A terminal gets the progress line, rewritten in place, and wiped before a message.
func TestProgressOnATerminal(t *testing.T) {
	ctl, term := openPTY(t)
	if !isTerminal(term) {
		t.Fatal("a pseudo-terminal is not taken for a terminal")
	}
	t.Setenv("TERM", "xterm")
	p := newProgress(term)
	p.Show(func() string { return "12 read, 10 published, 0 refused" })
	p.Show(func() string { return "not yet: within the interval" })
	p.Print(term, "in.jsonl:3: refused\n") // a message wipes the line first
	p.Clear()                              // nothing left to wipe
	_ = ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	want := "\r\x1b[K12 read, 10 published, 0 refused\r\x1b[Kin.jsonl:3: refused\r\n" // the terminal ends lines with CR LF
	var got []byte
	buf := make([]byte, 256)
	for len(got) < len(want) {
		n, err := ctl.Read(buf)
		if err != nil {
			t.Fatalf("read %q, then %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != want {
		t.Fatalf("the terminal got %q, want %q", got, want)
	}
	t.Setenv("TERM", "dumb")
	if isTerminal(term) {
		t.Fatal("TERM=dumb still gets a progress line")
	}
}
