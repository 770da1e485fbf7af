package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// fillBefore is fillLocked as it was before FillAll kept a memo per worker
// and Cost its step costs: filled from the record at every decision, the
// queue's attention summed over its requests.
func fillBefore(c *Candidate, wl *workerLoad, blockSize int, now time.Time) {
	if wl == nil {
		*c = Candidate{Worker: c.Worker, Overlap: c.Overlap, Timing: c.Timing}
		return
	}
	c.PrefillBlocks, c.DecodeBlocks = wl.prefillBlocks, len(wl.blocks)
	c.QueuedTokens, c.Decoding = wl.prefillBlocks*blockSize, wl.decoding
	var attn int64
	for _, r := range wl.queue {
		n := int64(max(r.prefillBlocks, 0))
		attn += n * (2*int64(max(len(r.blocks)-r.prefillBlocks, 0)) + n)
	}
	c.QueuedAttn = float64(attn) * float64(blockSize) * float64(blockSize)
	used := len(wl.blocks)
	if !wl.reportAt.IsZero() && wl.reportAt.After(now.Add(-ReportTTL)) {
		r := wl.report
		c.QueuedTokens += r.PrefillTokens
		c.QueuedAttn += r.PrefillAttn
		c.Decoding += r.Decoding
		used += r.DecodeBlocks
	}
	c.Usage = 0
	if t := wl.report.TotalBlocks; t > 0 {
		c.Usage = min(float64(used)/float64(t), 1)
	}
	progress, cached := headProgressBefore(wl, c, blockSize, now)
	c.QueuedTokens -= progress
	c.QueuedAttn -= timingmodel.Attention(cached, progress)
}

// headProgressBefore is the head's progress and its cached tokens: its
// tokens computed at its mean pace, each step its chunk's tokens and its
// share of the head's attention.
func headProgressBefore(wl *workerLoad, c *Candidate, blockSize int, now time.Time) (progress, cached int) {
	if len(wl.queue) == 0 {
		return 0, 0
	}
	head := wl.queue[0]
	left := head.prefillBlocks*blockSize - blockSize
	elapsed := float64(now.Sub(wl.headSince)) / float64(time.Millisecond)
	if left <= 0 || elapsed <= 0 || !c.Timing.Valid() {
		return 0, 0
	}
	cached = max(len(head.blocks)-head.prefillBlocks, 0) * blockSize
	chunk := min(max(c.Timing.MaxBatchedTokens-c.Decoding, 1), left)
	attn := timingmodel.Attention(cached, left) * float64(chunk) / float64(left)
	// A step that decodes pays the decode step and the chunk's tokens
	// (timingmodel's StepAttentionMs).
	step := c.Timing.PrefillQuadratic*attn + c.Timing.PrefillPerToken*float64(chunk) + c.Timing.StepConstant()
	if c.Decoding > 0 {
		step = c.Timing.DecodeMs(c.Usage) + (c.Timing.PrefillQuadratic*attn + c.Timing.PrefillPerToken*float64(chunk))
	}
	if step <= 0 {
		return 0, 0
	}
	return min(int(elapsed/step*float64(chunk)), left), cached
}

// ttftBefore is the model's TTFTMs written out, without Steps: the
// attention of the queued prompts and the request's (queuedAttn, newAttn),
// the tokens' linear time and a per-step constant per step (a step that
// decodes too without it: its decode step pays it, as StepMs).
func ttftBefore(m timingmodel.Model, queuedTokens int, queuedAttn float64, newTokens int, newAttn float64, decoding int, usage, weight float64) float64 {
	x := queuedTokens + newTokens
	if x <= 0 {
		return 0
	}
	chunk := max(m.MaxBatchedTokens-decoding, 1)
	full := (x - 1) / chunk
	perBatch := m.StepConstant()
	if decoding > 0 {
		perBatch = 0
	}
	prefill := m.PrefillQuadratic*(queuedAttn+newAttn) + m.PrefillPerToken*float64(x) + perBatch*float64(full+1)
	cost := weight * prefill
	if decoding > 0 {
		cost += float64(full+1) * m.DecodeMs(usage)
	}
	return cost
}

func costBefore(c *Candidate, req Request, p Params) float64 {
	n := req.NewTokens(c.Overlap)
	own := timingmodel.Attention(req.Tokens-n, n)
	ttft := ttftBefore(c.Timing, c.QueuedTokens, c.QueuedAttn, n, own, c.Decoding, c.Usage, p.OverlapWeight)
	if req.Rate > 0 {
		queuedAttn := c.QueuedAttn
		if c.QueuedTokens <= 0 {
			queuedAttn = 0
		}
		ahead := ttftBefore(c.Timing, c.QueuedTokens, queuedAttn, 0, 0, c.Decoding, c.Usage, p.OverlapWeight)
		work := max(ttft-ahead, 0)
		c.Cost = ttft + req.Rate*work*(ahead+work/2)
	} else {
		c.Cost = ttft
	}
	return c.Cost
}

// selectBefore is Select with costBefore.
func selectBefore(cands []Candidate, req Request, p Params, rng *rand.Rand) int {
	best := math.Inf(1)
	for i := range cands {
		best = min(best, costBefore(&cands[i], req, p))
	}
	if p.Temperature <= 0 {
		ties, chosen, overlap := 0, -1, -1
		for i, c := range cands {
			if c.Cost > best {
				continue
			}
			switch {
			case c.Overlap > overlap:
				ties, chosen, overlap = 1, i, c.Overlap
			case c.Overlap == overlap:
				ties++
				if rng.IntN(ties) == 0 {
					chosen = i
				}
			}
		}
		return chosen
	}
	worst := best
	for _, c := range cands {
		worst = max(worst, c.Cost)
	}
	span := worst - best
	if span == 0 {
		return rng.IntN(len(cands))
	}
	weights := make([]float64, len(cands))
	total := 0.0
	for i, c := range cands {
		weights[i] = math.Exp(-(c.Cost - best) / span / p.Temperature)
		total += weights[i]
	}
	r := rng.Float64() * total
	for i, w := range weights {
		if r < w {
			return i
		}
		r -= w
	}
	return len(cands) - 1
}

// termsBefore are the terms costBefore prices: KV's, less those that add
// nothing to these candidates (Seed, TierLoad, AdapterLoad: no shared
// prefix, lower tier or adapter) and DecodeStall, which came after.
var termsBefore = Compose(Lowest{}, Prefill{}, Decode{}, QueueWait{}, Seed{}, TierLoad{}, AdapterLoad{})

// TestDecisionsMatchBefore drives a Load through random routes, prefill
// completions, frees, expiries, reports (fresh and stale), departures, timing
// models that change (and are invalid, or differ from another in the sign
// of a zero only), block sizes and candidate lists, and checks at every
// decision that FillAll and Select, with their memos and prepared step
// costs, fill and cost every candidate exactly (to the bit) as the code
// before them did, and choose the same worker from the same random state,
// at temperature 0 and above, with and without a rate. FillAll and
// FillAllVersion (whose caller numbers its models) alternate.
func TestDecisionsMatchBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	now := time.Unix(1000, 0)
	l := NewLoadClock(func() time.Time { return now })
	models := []timingmodel.Model{timingmodel.Default(), timingmodel.Default().Scaled(3), linear,
		{PrefillPerToken: 0.01, PrefillPerBatch: 2, DecodeBase: 4, MaxBatchedTokens: 64},
		{PrefillPerToken: math.Copysign(0, -1), PrefillPerBatch: 2, DecodeMin: math.Copysign(0, -1), MaxBatchedTokens: 64},
		{PrefillPerToken: 0, PrefillPerBatch: 2, MaxBatchedTokens: 64},
		{PrefillPerToken: math.NaN(), MaxBatchedTokens: 8}, {}}
	timing := map[uint64]timingmodel.Model{}
	lists := [][]index.WorkerID{{w(1), w(2), w(3), w(4), w(5), w(6)}, {w(1), w(2), w(3), w(4), w(5), w(6)}, {w(2), w(3), w(7)}, {w(6), w(5), w(4), w(3), w(2), w(1)}}
	var ids []string
	decisions := 0
	var timingVer uint64
	for step := range 20_000 {
		now = now.Add(time.Duration(rng.IntN(4_000)) * time.Microsecond)
		wk := w(uint64(1 + rng.IntN(7)))
		switch rng.IntN(12) {
		case 0, 1, 2:
			id := fmt.Sprint("r", step)
			blocks := make([]uint64, rng.IntN(12))
			for i := range blocks {
				blocks[i] = uint64(rng.IntN(30))
			}
			l.Add(id, wk, rng.IntN(60), blocks)
			ids = append(ids, id)
		case 3, 4:
			if len(ids) > 0 {
				l.PrefillDone(ids[rng.IntN(len(ids))])
			}
		case 5:
			if len(ids) > 0 {
				l.Free(ids[rng.IntN(len(ids))])
			}
		case 6:
			var reqs []ReportedRequest
			for range rng.IntN(4) {
				reqs = append(reqs, ReportedRequest{ID: fmt.Sprint("foreign", rng.IntN(5)), PrefillTokens: rng.IntN(3) * rng.IntN(500), DecodeBlocks: rng.IntN(50)})
			}
			if rng.IntN(5) == 0 {
				reqs = nil // an aggregate-only report
			}
			l.Report(wk, reqs, rng.IntN(900), rng.IntN(3)*200, 16)
		case 7:
			timing[wk.Instance] = models[rng.IntN(len(models))]
			timingVer++ // it may be the same model: the version may change anyway
		case 8:
			if rng.IntN(8) == 0 {
				l.RemoveWorker(wk)
			}
		case 9:
			if rng.IntN(4) == 0 {
				l.Expire(now.Add(-time.Duration(rng.IntN(3_000)) * time.Millisecond))
			}
		case 10:
			now = now.Add(time.Duration(rng.IntN(3)) * ReportTTL / 2) // reports go stale
		}
		list := lists[rng.IntN(len(lists))]
		bs := []int{16, 16, 16, 4}[rng.IntN(4)]
		got := make([]Candidate, len(list))
		want := make([]Candidate, len(list))
		for j, id := range list {
			m, ok := timing[id.Instance]
			if !ok {
				m = timingmodel.Default()
			}
			got[j] = Candidate{Worker: id, Overlap: rng.IntN(8), Timing: m}
			want[j] = got[j]
			fillBefore(&want[j], l.workers[id], bs, now)
		}
		if rng.IntN(3) == 0 {
			l.FillAll(got, bs)
		} else {
			l.FillAllVersion(got, bs, timingVer)
		}
		req := Request{Blocks: 10, Tokens: 10*bs - rng.IntN(bs), BlockSize: bs}
		if rng.IntN(3) > 0 {
			req.Rate = rng.Float64() * 0.1
		}
		p := Params{OverlapWeight: []float64{1, 0.5, 2, 0}[rng.IntN(4)], Temperature: []float64{0, 0, 0.3}[rng.IntN(3)]}
		seed := rng.Uint64()
		chosen, err := termsBefore.Select(got, req, p, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		wantChosen := selectBefore(want, req, p, rand.New(rand.NewPCG(seed, 1)))
		for j := range got {
			g := got[j]
			g.steps, g.prepared = timingmodel.Steps{}, false
			if g.Worker != want[j].Worker || g.Overlap != want[j].Overlap || g.PrefillBlocks != want[j].PrefillBlocks ||
				g.DecodeBlocks != want[j].DecodeBlocks || g.QueuedTokens != want[j].QueuedTokens || g.Decoding != want[j].Decoding ||
				math.Float64bits(g.Usage) != math.Float64bits(want[j].Usage) || !g.Timing.Same(&want[j].Timing) ||
				math.Float64bits(g.Cost) != math.Float64bits(want[j].Cost) && !(math.IsNaN(g.Cost) && math.IsNaN(want[j].Cost)) {
				t.Fatalf("step %d, candidate %d:\n got %+v\nwant %+v", step, j, g, want[j])
			}
		}
		if chosen != wantChosen {
			t.Fatalf("step %d: chose %d, before %d", step, chosen, wantChosen)
		}
		decisions++
	}
	if decisions == 0 {
		t.Fatal("no decisions")
	}
}
