//go:build race

package ingress

// raceOn: the race detector is on (its instrumentation makes stack frames larger).
const raceOn = true
