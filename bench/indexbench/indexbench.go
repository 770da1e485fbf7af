// Package indexbench builds realistic index workloads for the index's
// benchmarks and the router-index-bench command: shared system prompts held
// by many workers, and per-worker conversations branching from them.
package indexbench

import (
	"math/rand/v2"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// Workload is an index filled to a size, plus requests to look up.
type Workload struct {
	Index    *index.Index
	Requests [][]uint64
	Entries  int
	// CPUShare is the share of each worker's blocks RouteCore stores on
	// the host tier (KV_MEDIUM_CPU) rather than GPU, chosen by hash: the
	// router's index then keeps tiers, and decisions price them. 0: all
	// on GPU, as before tiers.
	CPUShare float64
	// DPSize, above 1, makes RouteCore's router see the workload's workers
	// as data-parallel ranks: consecutive workers are the ranks of one
	// instance (worker w is rank (w-1) % DPSize of instance
	// (w-1) / DPSize + 1), whose card declares DPSize ranks. The
	// candidates, their blocks and their load are the same; the router
	// routes to (instance, rank).
	DPSize int
	// TokenRequests, when set (BuildTokens), are the requests' token ids,
	// which the route decision sends instead of their hashes (Requests),
	// as the frontend does, with Salt as their cache_salt and LoRA as
	// their adapter; the router then hashes each.
	TokenRequests [][]uint32
	Salt, LoRA    string
	// LoRAs, above 0, makes RouteCore's cards list that many adapters
	// (LoRA among them when set), 4 slots each, and every worker's load
	// report list 4 of them loaded: a request naming one is filtered to
	// the workers that list it and priced with its load where not loaded.
	LoRAs int
	// Sessions, above 0, gives the route decision's requests session ids,
	// that many distinct ones taken in turn: each is bound at its first
	// turn and its later turns go through the binding.
	Sessions int
	// loads are the workers' load reports ReportLoads sends, made once:
	// a benchmark's own garbage would add collector cycles to the
	// router's.
	loads []*workerv1.LoadMetrics
	// loadsDP is the DPSize loads were made at.
	loadsDP int
}

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// chain extends parent by n blocks whose hashes depend on seed.
func chain(parent uint64, seed uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		parent = mix(parent ^ mix(seed+uint64(i)))
		out[i] = parent
	}
	return out
}

// Build fills an index with about entries (block, worker) pairs over the
// given number of workers, and makes requests of reqBlocks blocks: a shared
// system prompt, part of an existing conversation, then new blocks.
func Build(workers, entries, reqBlocks, requests int, seed uint64) *Workload {
	r := rand.New(rand.NewPCG(seed, 1))
	x := index.New()
	const prompts, promptBlocks, convBlocks = 32, 32, 128
	system := make([][]uint64, prompts)
	for i := range system {
		system[i] = chain(0, uint64(i)<<32, promptBlocks)
	}
	type conv struct{ blocks []uint64 }
	var convs []conv
	perWorker := entries / workers
	total := 0
	for w := range workers {
		id := index.WorkerID{Instance: uint64(w + 1)}
		for x.Blocks(id) < perWorker {
			p := system[r.IntN(prompts)]
			c := chain(p[len(p)-1], r.Uint64(), convBlocks)
			x.Store(id, p)
			x.Store(id, c)
			convs = append(convs, conv{blocks: append(append([]uint64(nil), p...), c...)})
		}
		total += x.Blocks(id)
	}
	reqs := make([][]uint64, requests)
	for i := range reqs {
		c := convs[r.IntN(len(convs))].blocks
		keep := min(len(c), reqBlocks*3/4)
		req := append([]uint64(nil), c[:keep]...)
		req = append(req, chain(req[len(req)-1], r.Uint64(), reqBlocks-keep)...)
		reqs[i] = req
	}
	return &Workload{Index: x, Requests: reqs, Entries: total}
}

// Events returns n stored events of blockPer blocks each for a worker, as
// an engine emits them while serving conversations.
func Events(n, blockPer int, seed uint64) [][]uint64 {
	out := make([][]uint64, n)
	var parent uint64
	for i := range out {
		if i%8 == 0 {
			parent = mix(seed + uint64(i))
		}
		out[i] = chain(parent, seed^uint64(i), blockPer)
		parent = out[i][len(out[i])-1]
	}
	return out
}
