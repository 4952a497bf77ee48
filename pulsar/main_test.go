package pulsar_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestMain poisons every frame buffer given back for reuse, so that any test reading a
// payload after its frame was released reads the poison instead of its bytes.
func TestMain(m *testing.M) {
	pulsartest.PoisonReleasedFrames(true)
	goleak.VerifyTestMain(m)
}
