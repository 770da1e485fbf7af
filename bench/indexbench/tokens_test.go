package indexbench_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/bench/indexbench"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBuildTokens: a token workload's requests hash, with its extra, to
// blocks its index holds (three quarters of each request on some worker),
// and the same tokens hashed without the extra match nothing.
func TestBuildTokens(t *testing.T) {
	for _, extra := range []kvhash.Extra{{}, {Salt: "tenant-a"}, {LoRA: "adapter-0"}, {Salt: "tenant-a", LoRA: "adapter-0"}} {
		t.Run(extra.Salt+"/"+extra.LoRA, func(t *testing.T) {
			wl := indexbench.BuildTokens(4, 20_000, 128, 16, 7, extra)
			if wl.Entries < 20_000 || len(wl.TokenRequests) != 16 || len(wl.Requests) != 16 || wl.Salt != extra.Salt || wl.LoRA != extra.LoRA {
				t.Fatalf("workload: %d entries, %d token requests, %d hashed, salt %q, adapter %q", wl.Entries, len(wl.TokenRequests), len(wl.Requests), wl.Salt, wl.LoRA)
			}
			for i, toks := range wl.TokenRequests {
				if len(toks) != 128*16 {
					t.Fatalf("request %d has %d tokens, want %d", i, len(toks), 128*16)
				}
				blocks := kvhash.ExtraHashes(toks, 16, extra, nil)
				hashes := make([]uint64, len(blocks))
				for j, b := range blocks {
					hashes[j] = b.Sequence
					if b.Sequence != wl.Requests[i][j] {
						t.Fatalf("request %d block %d: hash %x, the workload says %x", i, j, b.Sequence, wl.Requests[i][j])
					}
				}
				if best := longest(wl.Index, hashes); best != 96 {
					t.Fatalf("request %d: longest cached prefix %d blocks, want 96", i, best)
				}
				if extra != (kvhash.Extra{}) {
					plain := kvhash.ExtraHashes(toks, 16, kvhash.Extra{}, nil)
					for j, b := range plain {
						hashes[j] = b.Sequence
					}
					if best := longest(wl.Index, hashes); best != 0 {
						t.Fatalf("request %d hashed without its extra: %d blocks cached, want 0", i, best)
					}
				}
			}
		})
	}
}

func longest(x *index.Index, hashes []uint64) int {
	best := 0
	for _, o := range x.AppendOverlaps(nil, hashes) {
		best = max(best, int(o.Blocks))
	}
	return best
}
