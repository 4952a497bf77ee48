package pulsar

import (
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/framepool"
)

// SetHandBackExpiry shortens handBackExpiry for a test; the returned func restores it.
func SetHandBackExpiry(d time.Duration) (restore func()) {
	old := handBackExpiry
	handBackExpiry = d
	return func() { handBackExpiry = old }
}

// PendingNacks counts the entries c will ask back for nacks not yet due.
func PendingNacks(c *Consumer) int {
	n := 0
	for _, pc := range c.partitions() {
		pc.mu.Lock()
		n += len(pc.nacks)
		pc.mu.Unlock()
	}
	return n
}

// HandedBack counts the batch trackers of c awaiting their entry handed back.
func HandedBack(c *Consumer) int {
	n := 0
	for _, pc := range c.partitions() {
		pc.mu.Lock()
		for _, t := range pc.trackers {
			if !t.handedBack.IsZero() {
				n++
			}
		}
		pc.mu.Unlock()
	}
	return n
}

// SetTLSFilesEvery shortens how often the TLS files are checked for a test; the
// returned func restores it.
func SetTLSFilesEvery(d time.Duration) (restore func()) {
	old := tlsFilesEvery
	tlsFilesEvery = d
	return func() { tlsFilesEvery = old }
}

// SetEnqueueHook has fn run whenever messages are about to be queued for the
// application; the returned func removes it.
func SetEnqueueHook(fn func()) (restore func()) {
	enqueueHook = fn
	return func() { enqueueHook = nil }
}

// FrameBuffersMade counts the pooled frame buffers allocated rather than reused.
func FrameBuffersMade() int64 { return framepool.Made() }
