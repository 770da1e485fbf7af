package scheduler

import "slices"

// LateWindow is how many of a model's last first tokens Lateness keeps.
// Its quantile is an order statistic of them: with 64, the 0.9 quantile
// lies between the 6th and 7th latest, and a change in the fleet (its
// load, its decode step) has replaced the whole window after 64 requests,
// a few seconds of a saturated fleet's arrivals. Fewer would make the
// tail a sample or two; many more would keep a past load's.
const LateWindow = 64

// LateQuantile is the quantile of Lateness that saturation adds to a
// prediction (Limits.LateMs): the fleet's latency objectives are p90s
// (the planner's and the router's TTFT objective), and a request released
// at a prediction p has its first token by p plus the 0.9 quantile of
// the lateness nine times out of ten.
const LateQuantile = 0.9

// Lateness estimates, online, how much later than predicted first tokens
// come: what lies between the router's prediction at a decision
// (Candidate.FirstTokenMs) and the first token the caller reports
// (MarkPrefillComplete), which the timing model does not describe: the
// transport both ways, where in the engine's step the request arrives,
// the step a prompt shares with decoding requests. It keeps the last
// LateWindow residuals, in ms (negative: earlier than predicted), in
// arrival order and sorted, so that adding one costs two moves of at
// most LateWindow values and a quantile is a read. Its zero value is
// empty. Not safe for concurrent use.
type Lateness struct {
	ring   [LateWindow]float64
	sorted []float64
	next   int
}

// Add records one residual, forgetting the oldest of a full window.
func (l *Lateness) Add(ms float64) {
	if len(l.sorted) == LateWindow {
		old := l.ring[l.next]
		i, _ := slices.BinarySearch(l.sorted, old)
		l.sorted = slices.Delete(l.sorted, i, i+1)
	}
	l.ring[l.next] = ms
	l.next = (l.next + 1) % LateWindow
	i, _ := slices.BinarySearch(l.sorted, ms)
	l.sorted = slices.Insert(l.sorted, i, ms)
}

// Len is how many residuals the window holds.
func (l *Lateness) Len() int { return len(l.sorted) }

// Quantile is the q quantile (0..1) of the residuals held, by nearest
// rank: the smallest residual at least a fraction q of them do not
// exceed. 0 when none are held.
func (l *Lateness) Quantile(q float64) float64 {
	n := len(l.sorted)
	if n == 0 {
		return 0
	}
	// Nearest rank: ceil(q n), 1-based.
	k := int(q * float64(n))
	if float64(k) < q*float64(n) {
		k++
	}
	return l.sorted[min(max(k, 1), n)-1]
}
