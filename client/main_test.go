package client_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(benchBridgeEnv) != "" {
		serveBenchBridge() // the benchmarks' bridge, in a process of its own
		return
	}
	goleak.VerifyTestMain(m)
}
