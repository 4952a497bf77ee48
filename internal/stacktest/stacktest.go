// Package stacktest measures the goroutine stacks a process holds, for tests that bound
// what an idle stream keeps.
package stacktest

import (
	"runtime"
	"runtime/metrics"
)

// BytesAfterGC returns the heap's stack bytes after enough collections for every stack
// that can shrink to have shrunk: a collection halves a stack at most once, and a
// goroutine may start with more than 2 KiB (the runtime starts them at the average
// size in use).
func BytesAfterGC() uint64 {
	for range 5 {
		runtime.GC()
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
