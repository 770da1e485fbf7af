package engine

import (
	"math"
	"time"
)

// PrefillTime returns how long prefilling tokens new (uncached) prompt tokens
// takes in one batch: 4.209989e-7*t^2 + 1.518344e-2*t + 16.50142 ms, divided by
// the speed-up ratio. It is zero for no tokens and for a speed-up of 0 (no
// delay). The coefficients are Dynamo's mocker fit of vLLM on an H100.
func PrefillTime(tokens int, speedup float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	t := float64(tokens)
	return scale(4.209989e-7*t*t+1.518344e-2*t+16.50142, speedup)
}

// DecodeTime returns how long one decode step takes with a fraction usage
// (0..1) of the KV blocks in use: max(1, -25.74*u^2 + 54.01*u + 5.74) ms,
// divided by the speed-up ratio; zero for a speed-up of 0 (no delay).
func DecodeTime(usage, speedup float64) time.Duration {
	u := min(max(usage, 0), 1)
	return scale(max(1, -25.74*u*u+54.01*u+5.74), speedup)
}

// scale converts milliseconds of simulated compute to a duration at a
// speed-up ratio, rounding to the nanosecond.
func scale(ms, speedup float64) time.Duration {
	if speedup == 0 {
		return 0
	}
	return time.Duration(math.Round(ms / speedup * float64(time.Millisecond)))
}
