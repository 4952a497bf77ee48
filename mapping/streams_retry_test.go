package mapping

import (
	"testing"
	"time"
)

func TestRetryDelayGrowsIsCappedAndJittered(t *testing.T) {
	r := Retry{Initial: time.Second, Multiplier: 1.6, Jitter: 0.2, Max: 120 * time.Second}
	cases := []struct {
		n    uint32
		want time.Duration
	}{{0, time.Second}, {1, 1600 * time.Millisecond}, {2, 2560 * time.Millisecond}, {10, 109951162777 * time.Nanosecond}, {11, 120 * time.Second}, {1 << 31, 120 * time.Second}}
	for _, c := range cases {
		mid := r.Delay(c.n, 0.5)
		if diff := mid - c.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("after %d redeliveries: %v, want %v", c.n, mid, c.want)
		}
		// ±20 %, but never past the 120 s cap (the documented maximum).
		lo, hi := r.Delay(c.n, 0), time.Duration(0)
		for i := range 1000 {
			hi = max(hi, r.Delay(c.n, float64(i)/1000))
		}
		wantHi := min(mid*12/10, r.Max)
		if lo < mid*8/10-time.Millisecond || lo > mid*8/10+time.Millisecond || hi < wantHi-200*time.Millisecond || hi > wantHi {
			t.Errorf("after %d redeliveries the jitter spans %v..%v around %v, want -20%%..%v", c.n, lo, hi, mid, wantHi)
		}
	}
}
