package indexbench

import (
	"math/rand/v2"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// blockTokens is the number of tokens per block of BuildTokens' workloads
// (RouteCore's cards declare 16).
const blockTokens = 16

// BuildTokens is Build with prompts of token ids, as the frontend sends
// them to the router: the same shape (32 shared system prompts of 32
// blocks, conversations of 128 blocks branching from them, requests of
// reqBlocks blocks three quarters of which an existing conversation holds),
// every block's hash computed by kvhash from its tokens with extra (a cache
// salt, a LoRA adapter), as engines hash what they cache under them. The
// requests (TokenRequests) carry the tokens and the extra (Salt, LoRA), so
// the router hashes each one as the service does; Requests holds their
// hashes.
func BuildTokens(workers, entries, reqBlocks, requests int, seed uint64, extra kvhash.Extra) *Workload {
	r := rand.New(rand.NewPCG(seed, 1))
	x := index.New()
	const prompts, promptBlocks, convBlocks = 32, 32, 128
	system := make([][]uint32, prompts)
	for i := range system {
		system[i] = randomTokens(r, promptBlocks*blockTokens)
	}
	// A conversation is its system prompt and the random source of its
	// own tokens, which are generated again when a request needs them
	// rather than kept for every conversation.
	type conv struct {
		prompt int
		seed   uint64
	}
	convTokens := func(c conv) []uint32 {
		cr := rand.New(rand.NewPCG(c.seed, 2))
		return append(append([]uint32(nil), system[c.prompt]...), randomTokens(cr, convBlocks*blockTokens)...)
	}
	var convs []conv
	var blocks []kvhash.Block
	seqs := make([]uint64, 0, promptBlocks+convBlocks)
	perWorker := entries / workers
	total := 0
	for w := range workers {
		id := index.WorkerID{Instance: uint64(w + 1)}
		for x.Blocks(id) < perWorker {
			c := conv{prompt: r.IntN(prompts), seed: r.Uint64()}
			blocks = kvhash.ExtraHashes(convTokens(c), blockTokens, extra, blocks[:0])
			seqs = seqs[:0]
			for _, b := range blocks {
				seqs = append(seqs, b.Sequence)
			}
			x.Store(id, seqs)
			convs = append(convs, c)
		}
		total += x.Blocks(id)
	}
	wl := &Workload{Index: x, Entries: total, Salt: extra.Salt, LoRA: extra.LoRA}
	for range requests {
		toks := convTokens(convs[r.IntN(len(convs))])
		keep := min(len(toks), reqBlocks*3/4*blockTokens)
		req := append(toks[:keep:keep], randomTokens(r, reqBlocks*blockTokens-keep)...)
		blocks = kvhash.ExtraHashes(req, blockTokens, extra, blocks[:0])
		hashes := make([]uint64, len(blocks))
		for i, b := range blocks {
			hashes[i] = b.Sequence
		}
		wl.TokenRequests = append(wl.TokenRequests, req)
		wl.Requests = append(wl.Requests, hashes)
	}
	return wl
}

// randomTokens is n token ids of a 150,000-token vocabulary.
func randomTokens(r *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(r.IntN(150_000))
	}
	return out
}
