//go:build race

package pulsarpool

// raceOn: the race detector is on (its sync.Pool drops what is put at random).
const raceOn = true
