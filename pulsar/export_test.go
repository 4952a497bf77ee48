package pulsar

import "time"

// SetHandBackExpiry shortens handBackExpiry for a test; the returned func restores it.
func SetHandBackExpiry(d time.Duration) (restore func()) {
	old := handBackExpiry
	handBackExpiry = d
	return func() { handBackExpiry = old }
}
