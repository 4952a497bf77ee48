//go:build race

package egress

// raceOn: the race detector is on (its instrumentation makes stack frames larger).
const raceOn = true
