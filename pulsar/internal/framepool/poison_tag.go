//go:build framepoison

package framepool

// A binary built with the framepoison tag (for end-to-end tests only, never shipped)
// poisons every frame buffer given back for reuse, so that a record written from a
// released frame reads PoisonByte: the e2e suites run the built binary, whose tests
// cannot call SetPoison.
func init() { poison.Store(true) }
