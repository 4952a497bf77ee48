package pulsartest

import "github.com/recordio-bridge/bridge/pulsar/internal/framepool"

// PoisonReleasedFrames has every frame buffer a consumer gives back for reuse (once each
// message pointing into it was released: pulsar.Message.Release) filled with
// PoisonedByte first, so that a payload read after its release reads that pattern
// instead of its bytes, for tests of what holds messages. It returns the previous
// setting; it applies to the whole process.
func PoisonReleasedFrames(on bool) bool { return framepool.SetPoison(on) }

// PoisonedByte is what PoisonReleasedFrames fills a released frame with.
const PoisonedByte = framepool.PoisonByte
