//go:build !race

package pulsarpool

const raceOn = false
