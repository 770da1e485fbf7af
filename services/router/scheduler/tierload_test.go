package scheduler

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestTierLoad: a prefix held below GPU costs its load time at the
// worker's published rate per tier (the default when unset), never more
// than recomputing it, so that under KV a host hit costs more than a GPU
// hit and less than a miss, and a worker without lower blocks is priced
// as before to the bit.
func TestTierLoad(t *testing.T) {
	m := timingmodel.Default()
	slowDisk := m
	slowDisk.DiskLoadPerToken = 1 // far slower than recomputing
	fastCPU := m
	fastCPU.CPULoadPerToken = 0.001
	req := Request{Blocks: 64, Tokens: 64 * 16, BlockSize: 16}
	prefill := func(c Candidate, overlap int) float64 {
		s := c.Timing.Steps(c.Decoding, c.Usage)
		sp := s.Span(c.QueuedTokens + req.NewTokens(overlap))
		sp.Attn = c.QueuedAttn + req.Attention(overlap)
		return s.PrefillMs(sp, 1)
	}
	base := Candidate{Overlap: 64, Timing: m}
	tests := []struct {
		name string
		c    Candidate
		want float64
	}{
		{"all on gpu", base, 0},
		{"40 blocks on host, default rate", Candidate{Overlap: 64, Lower: [3]int32{40, 0, 0}, Timing: m}, 40 * 16 * timingmodel.DefaultCPULoadMsPerToken},
		{"40 blocks on host, published rate", Candidate{Overlap: 64, Lower: [3]int32{40, 0, 0}, Timing: fastCPU}, 40 * 16 * 0.001},
		{"host and disk", Candidate{Overlap: 64, Lower: [3]int32{8, 8, 0}, Timing: m},
			min(8*16*timingmodel.DefaultCPULoadMsPerToken+8*16*timingmodel.DefaultDiskLoadMsPerToken, prefill(base, 48)-prefill(base, 64))},
		{"unknown is priced as disk", Candidate{Overlap: 64, Lower: [3]int32{0, 0, 4}, Timing: m},
			min(4*16*timingmodel.DefaultDiskLoadMsPerToken, prefill(base, 60)-prefill(base, 64))},
		{"a load slower than recomputing costs the recomputation", Candidate{Overlap: 64, Lower: [3]int32{0, 10, 0}, Timing: slowDisk},
			prefill(Candidate{Timing: slowDisk}, 54) - prefill(Candidate{Timing: slowDisk}, 64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []Candidate{tt.c}
			TierLoad{}.Add(cands, req, Params{OverlapWeight: 1})
			near(t, "cost", []float64{cands[0].Cost}, []float64{tt.want})
		})
	}

	// Under KV: GPU hit < host hit < miss, with nothing else on the workers.
	cands := []Candidate{
		{Overlap: 64, Timing: m},
		{Overlap: 64, Lower: [3]int32{48, 0, 0}, Timing: m},
		{Overlap: 0, Timing: m},
	}
	KV.cost(cands, req, Params{OverlapWeight: 1})
	if !(cands[0].Cost < cands[1].Cost && cands[1].Cost < cands[2].Cost) {
		t.Fatalf("costs gpu %v, host %v, miss %v: want gpu < host < miss", cands[0].Cost, cands[1].Cost, cands[2].Cost)
	}
}
