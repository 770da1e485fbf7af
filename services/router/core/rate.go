package core

import "time"

// rateWindow is how many recent arrivals the request rate is measured
// over: enough to average out a Poisson process's noise (about 1/sqrt(64),
// 12%), few enough to follow a change of load within seconds.
const rateWindow = 64

// arrivals measures the recent request rate from the times of the last
// rateWindow requests routed, by this router or (through replica sync) by
// its peers. The zero value is ready; it is not safe for concurrent use.
type arrivals struct {
	at   [rateWindow]time.Time
	n    int // how many of at are set
	next int // where the next arrival goes
}

// add records an arrival.
func (a *arrivals) add(t time.Time) {
	a.at[a.next] = t
	a.next = (a.next + 1) % rateWindow
	a.n = min(a.n+1, rateWindow)
}

// perMs is the arrival rate in requests per millisecond as of now: the
// arrivals in the window over the time since the oldest of them, so that
// it falls when requests stop coming. Fewer than two arrivals measure
// nothing (0).
func (a *arrivals) perMs(now time.Time) float64 {
	if a.n < 2 {
		return 0
	}
	oldest := a.at[(a.next-a.n+rateWindow)%rateWindow]
	span := now.Sub(oldest)
	// Arrivals in one instant (or a peer's clock slightly ahead) span
	// nothing: count them over a millisecond, not forever.
	span = max(span, time.Millisecond)
	return float64(a.n) / (float64(span) / float64(time.Millisecond))
}
