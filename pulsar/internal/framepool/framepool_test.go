package framepool

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestABufferGoesBackOnlyAtItsLastRelease: a buffer adopted by three holders is filled
// with the poison at the third release, not before; a fourth release, and a second
// adoption, panic instead of giving it back twice; small and huge frames are not pooled.
func TestABufferGoesBackOnlyAtItsLastRelease(t *testing.T) {
	defer SetPoison(SetPoison(true))
	if Get(1<<minShift) != nil || Get(1<<maxShift+1) != nil {
		t.Fatal("a frame of 4 KiB or of more than 8 MiB came from the pool")
	}
	b := Get(10 << 10)
	if len(b.Bytes()) != 10<<10 || cap(b.Bytes()) != 16<<10 {
		t.Fatalf("a 10 KiB frame got %d bytes of %d, want 10 KiB of 16", len(b.Bytes()), cap(b.Bytes()))
	}
	p := b.Bytes()
	for i := range p {
		p[i] = 1
	}
	b.Adopt(3)
	b.Release()
	b.Release()
	if p[0] != 1 || p[len(p)-1] != 1 {
		t.Fatal("the buffer was given back with one holder left")
	}
	b.Release()
	if p[0] != PoisonByte || p[len(p)-1] != PoisonByte {
		t.Fatal("the buffer was not given back at its last release")
	}
	c := Get(12 << 10) // b, or a new one if the pool dropped it
	c.Adopt(1)
	mustPanic(t, "a second adoption", func() { c.Adopt(1) })
	c.Release()
	mustPanic(t, "a release beyond its holders", c.Release)
	c.refs.Store(0) // c is in the pool, spoilt by the release beyond its holders
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}
