//go:build !race

package egress

const raceOn = false
