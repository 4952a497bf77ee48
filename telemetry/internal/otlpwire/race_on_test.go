//go:build race

package otlpwire

// raceOn: the race detector is on (its sync.Pool drops buffers at random).
const raceOn = true
