//go:build framepoison

package framepool

import "testing"

// TestTheFramepoisonTagPoisonsFromTheStart: a build with the framepoison tag poisons
// released buffers without being asked (go test -tags framepoison).
func TestTheFramepoisonTagPoisonsFromTheStart(t *testing.T) {
	if !poison.Load() {
		t.Fatal("built with framepoison, yet released buffers are not poisoned")
	}
}
