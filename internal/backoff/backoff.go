// Package backoff computes the bridge's retry delays: an exponential schedule with a cap
// and jitter, where the jitter never takes a delay past its cap.
package backoff

import "time"

// Schedule is Initial × Multiplier^attempt, at most Max, spread by ±Jitter (a fraction,
// 0 to 1) and still at most Max.
type Schedule struct {
	Initial    time.Duration
	Multiplier float64
	Jitter     float64
	Max        time.Duration
}

// Delay is the wait before retry number attempt (0-based); u, in [0,1), picks the point
// in the spread (a random number in production, fixed in tests).
func (s Schedule) Delay(attempt int, u float64) time.Duration {
	d := float64(s.Initial)
	for range min(attempt, 64) {
		d *= s.Multiplier
		if d >= float64(s.Max) {
			break
		}
	}
	d = min(d, float64(s.Max))
	return Spread(time.Duration(d), s.Max, s.Jitter, u)
}

// Spread varies d by ±jitter (u in [0,1) picks the point) without passing max: the part
// of the spread above max is folded back below it, so a delay at its cap is still spread
// (uniformly over [max×(1-jitter), max]) instead of piling up on max.
func Spread(d, max time.Duration, jitter, u float64) time.Duration {
	j := float64(d) * (1 + jitter*(2*u-1))
	if m := float64(max); max > 0 && j > m {
		j = m - (j - m)
	}
	return time.Duration(j)
}
