//go:build !race

package ingress

const raceOn = false
