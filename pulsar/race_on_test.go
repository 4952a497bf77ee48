//go:build race

package pulsar_test

const raceEnabled = true
