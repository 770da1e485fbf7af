package replay

import (
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
)

// The disaggregated modes. The engines are split into a prefill pool
// (instances 1..PrefillWorkers, role prefill) and a decode pool (the rest,
// role decode), and the router's own core picks, for each request, a pair
// or one decode worker for the whole request (disagg: --disaggregation
// auto; disagg-always: always). A pair runs as the mocker's two legs do:
//
//   - the prefill engine computes the prompt as a prefill leg
//     (simengine.Request.Hold): its chunks share that engine's steps only
//     with other prompts, and the step that computes the last one gives
//     the first token and holds the blocks;
//   - the router hears of the handoff (PrefillDone, as the frontend's
//     MarkPrefillComplete), and the decode engine takes the request as
//     arrived KV (simengine.Request.Arrived, starting from the relayed
//     first token), which waits for admission there like any request;
//   - once admitted, into blocks allocated for it, the decode engine
//     pulls the blocks it does not cache over the link: blocks x block
//     size x bytes per token x 8 / Gb/s, holding its blocks (not a running
//     slot) meanwhile (simengine.Request.PullPerBlock), as vLLM's decode
//     worker reads the remote KV once its scheduler has allocated the
//     blocks;
//   - the prefill engine frees its held blocks at the end of the decode
//     engine's step in which the pull ended (with a free link, at the
//     handoff), and the decode engine computes only what a cached prompt
//     always computes (its last block) and decodes.
//
// In the aggregated modes a prompt's chunks share engine steps with the
// decodes running there, and every such step lasts the prefill's time
// plus the decode's (the engine's timing model): the inter-token gap the
// decodes see then is what the pools remove. A pair's time to first
// token ends when the decode engine emits the relayed token, as a client
// streaming from the decode worker sees it.

// disaggState is a disaggregated run's accounting.
type disaggState struct {
	// pairs counts the requests routed as pairs.
	pairs uint64
	// pulls are the prefill engines holding the KV of the decode legs
	// not yet pulled, by request id.
	pulls map[string]*simEngine
	// hitBlocks and queriedBlocks are the prompts' cached and full
	// blocks where each prompt was computed (the prefill leg's engine,
	// or the decode engine of a whole request).
	hitBlocks, queriedBlocks uint64
}

// pairLeg is what a pair's decode leg needs once its KV has moved.
type pairLeg struct {
	decode *simEngine
	prompt []uint32
	output int
	seed   uint64
}

// split is the prefill and decode pools' sizes (see Config).
func (c Config) split() (prefill, decode int) {
	switch {
	case c.PrefillWorkers > 0 && c.DecodeWorkers > 0:
		return c.PrefillWorkers, c.DecodeWorkers
	case c.PrefillWorkers > 0:
		return c.PrefillWorkers, c.Workers - c.PrefillWorkers
	case c.DecodeWorkers > 0:
		return c.Workers - c.DecodeWorkers, c.DecodeWorkers
	}
	return c.Workers / 2, c.Workers - c.Workers/2
}

// transferTime is how long n blocks take to move from a prefill to a
// decode engine, as the mocker's decode worker waits for them.
func (c Config) transferTime(blocks int) time.Duration {
	if blocks <= 0 || c.KVTransferGbps <= 0 || c.KVBytesPerToken <= 0 {
		return 0
	}
	bits := float64(blocks) * float64(c.Engine.BlockSize) * float64(c.KVBytesPerToken) * 8
	return time.Duration(bits / (c.KVTransferGbps * 1e9) / c.Engine.SpeedupRatio * float64(time.Second))
}

// roleOf is the role engine i (from 0) registers.
func (s *sim) roleOf(i int) commonv1.Role {
	if s.disagg == nil {
		return commonv1.Role_ROLE_UNSPECIFIED
	}
	if p, _ := s.cfg.split(); i < p {
		return commonv1.Role_ROLE_PREFILL
	}
	return commonv1.Role_ROLE_DECODE
}

// startPair starts request n's prefill leg on pre, for dec to decode.
func (s *sim) startPair(n int, id string, me int, resp *routerv1.RouteResponse, dec, pre *simEngine, prompt []uint32, output int) {
	if err := pre.e.Add(simengine.Request{ID: id, Prompt: prompt, MaxTokens: output, Seed: uint64(n + 1), Hold: true}); err != nil {
		s.routers[me].Free(id)
		s.reject(err)
		return
	}
	s.owner[id] = me
	pre.prefill += len(prompt)
	s.disagg.pairs++
	in := &inflight{arrival: s.now, pair: &pairLeg{decode: dec, prompt: prompt, output: output, seed: uint64(n + 1)}}
	s.reqs[id] = in
	if s.record {
		in.rec = s.recordArrival(n, dec, resp, len(prompt))
		in.rec.PrefillWorker = pre.id
	}
	if !pre.busy {
		s.step(pre)
	}
}

// handoff ends a pair's prefill leg on pre: the router hears of it, and
// the decode leg goes to its engine, which pulls the KV once it admits it
// (see pulled).
func (s *sim) handoff(pre *simEngine, in *inflight, o simengine.Output, owner router) {
	id, p, bs := o.RequestID, in.pair, s.cfg.Engine.BlockSize
	owner.PrefillDone(id)
	in.handedOff = true
	s.disagg.hitBlocks += uint64(o.Usage.CachedPromptTokens / bs)
	s.disagg.queriedBlocks += uint64(o.Usage.PromptTokens / bs)
	first := o.Tokens[0]
	in.pair = nil
	perBlock := s.cfg.transferTime(1)
	if perBlock == 0 {
		// A free link: the KV is there at once.
		s.release(pre, id)
	} else {
		s.disagg.pulls[id] = pre
	}
	err := p.decode.e.Add(simengine.Request{ID: id, Prompt: p.prompt, MaxTokens: p.output, Seed: p.seed, Arrived: true, FirstToken: &first,
		PullPerBlock: perBlock})
	if err != nil {
		if pre := s.disagg.pulls[id]; pre != nil {
			delete(s.disagg.pulls, id)
			s.release(pre, id)
		}
		owner.Free(id)
		delete(s.reqs, id)
		delete(s.owner, id)
		s.reject(err)
		return
	}
	if !p.decode.busy {
		s.step(p.decode)
	}
}

// pulled frees the prefill engines' blocks held for the decode legs whose
// KV a decode engine's step has pulled.
func (s *sim) pulled(ids []string) {
	for _, id := range ids {
		if pre := s.disagg.pulls[id]; pre != nil {
			delete(s.disagg.pulls, id)
			s.release(pre, id)
		}
	}
}

// release frees the blocks pre holds for request id's handoff.
func (s *sim) release(pre *simEngine, id string) {
	_, _ = pre.e.Release(id)
	if !pre.busy && !pre.e.Idle() {
		s.step(pre) // the freed blocks may admit what waited for them
	}
}

// firstOutput counts a whole request's prefix reuse at its first token
// (a pair's was counted at its handoff).
func (d *disaggState) firstOutput(in *inflight, o simengine.Output, bs int) {
	if in.handedOff {
		return
	}
	d.hitBlocks += uint64(o.Usage.CachedPromptTokens / bs)
	d.queriedBlocks += uint64(o.Usage.PromptTokens / bs)
}
