package scheduler

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// BenchmarkFillSelect times what a route decision asks of the scheduler
// at 100 workers: FillAll, then Select, with requests queued, decoding
// and reported on every worker.
func BenchmarkFillSelect(b *testing.B) {
	now := time.Unix(1000, 0)
	l := NewLoadClock(func() time.Time { return now })
	cands := make([]Candidate, 100)
	for i := range cands {
		wk := index.WorkerID{Instance: uint64(i + 1)}
		for j := range 3 {
			id := strconv.Itoa(i*3 + j)
			l.Add(id, wk, 40+j, []uint64{uint64(i), uint64(j)})
			if j == 0 {
				l.PrefillDone(id)
			}
		}
		l.Report(wk, []ReportedRequest{{ID: "foreign" + strconv.Itoa(i), PrefillTokens: 64, DecodeBlocks: 20}}, 0, 10_000, 16)
	}
	now = now.Add(300 * time.Millisecond)
	rng := rand.New(rand.NewPCG(1, 2))
	r := Request{Blocks: 128, Tokens: 128 * 16, BlockSize: 16, Rate: 0.01}
	b.ReportAllocs()
	for b.Loop() {
		for i := range cands {
			cands[i] = Candidate{Worker: index.WorkerID{Instance: uint64(i + 1)}, Overlap: i % 7 * 16, Timing: timingmodel.Default()}
		}
		l.FillAll(cands, 16)
		if _, err := Select(cands, r, Params{OverlapWeight: 1}, rng); err != nil {
			b.Fatal(err)
		}
	}
}
