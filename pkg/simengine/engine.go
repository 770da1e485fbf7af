// Package simengine is the core of the mocker: a simulated LLM inference engine
// with a real paged KV cache (prefix caching by kvhash sequence hash,
// reference counts, LRU eviction), vLLM-style continuous batching with chunked
// prefill, a timing model for prefill and decode, and the KV cache events and
// load metrics a real engine would publish.
//
// The Engine is a deterministic step function: it starts no goroutines, never
// sleeps and never reads a clock. Each Step schedules and "computes" one batch
// and returns how long that batch would have taken; the caller advances its
// clock by that much, sleeping in real time (the mocker worker) or moving a
// simulated clock (the router's replay benchmark). An Engine is not safe for
// concurrent use.
//
// # Scheduling
//
// Scheduling follows vLLM's v1 scheduler. Each step has a budget of
// MaxNumBatchedTokens tokens. Running requests are served first, in admission
// order: a decoding request takes one token, a request still in prefill takes
// the rest of its prompt or what is left of the budget (chunked prefill).
// When a running request needs a block and none can be allocated, even by
// evicting unused cached blocks, the most recently admitted running request is
// preempted (possibly the one that needs the block): its blocks are released
// and it goes back to the front of the waiting queue, to be prefilled again,
// prompt and generated tokens together, when readmitted (vLLM's recompute
// preemption; its released blocks usually are still cached then). Waiting
// requests are admitted in FIFO order, only in steps that preempted nothing,
// while fewer than MaxNumSeqs run, budget is left and the blocks for their
// first chunk can be allocated after counting their cached prefix; the first
// request that does not fit stops admission (no overtaking). As in vLLM, a
// fully cached prompt still computes its last block, which gives the logits
// of the first output token.
//
// # Timing
//
// A step costs StepTime: PrefillTime of its new prompt tokens (summed over
// requests in prefill) when it has no decoding request; otherwise
// DecodeTime at the fraction of KV blocks in use, plus the time its prompt
// tokens add beside the decodes (their prefill without its per-step
// constant, which the decode step pays: timingmodel.Model.StepMs); divided
// by SpeedupRatio. The prefill's quadratic term is attention, charged per
// chunk on its own sequence's context (timingmodel.Attention: a chunk
// after a cached prefix or after earlier chunks of its prompt attends to
// them, chunks of different prompts do not attend to one another); for
// one uncached prompt in one step it is PrefillTime's. Every decoding
// request's next token waits for the whole step, prompt chunk included.
//
// # Output
//
// A request generates MaxTokens tokens, unless one of its stop tokens comes
// first (the mocker has no end-of-sequence token of its own), derived from
// its prompt and seed, in [OutputTokenMin, OutputTokenMax). The first comes
// with the step that finishes its prefill, then one per decode step.
package simengine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// Errors returned by Engine methods.
var (
	// ErrInvalidRequest is returned by Add (and RequestFromProto) for a
	// request without id, prompt or tokens to generate, or with negative min
	// tokens; the message says which.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrDuplicateRequest is returned by Add for a request id already in the
	// engine.
	ErrDuplicateRequest = errors.New("duplicate request id")
	// ErrRequestTooLarge is returned by Add for a request whose prompt and
	// output could never fit in the KV cache at once.
	ErrRequestTooLarge = errors.New("request does not fit in the KV cache")
	// ErrUnknownRequest is returned by Cancel for a request id the engine
	// does not hold (never added, finished or already cancelled).
	ErrUnknownRequest = errors.New("unknown request id")
)

// Request is one generation request.
type Request struct {
	// ID identifies the request; unique among the engine's requests.
	ID string
	// Prompt is the tokenized prompt; it must not be empty.
	Prompt []uint32
	// MaxTokens is how many tokens to generate; it must be positive.
	MaxTokens int
	// Seed varies the generated tokens of equal prompts; equal prompts with
	// equal seeds generate equal tokens.
	Seed uint64
	// StopTokenIDs end the request (FinishStop) when generated, once
	// MinTokens tokens have been generated; the stop token is part of the
	// output. Generated tokens are pseudo-random, so a stop token in the
	// output range ends a request early now and then, as in real traffic.
	StopTokenIDs []uint32
	// MinTokens is the output length (stop token included) below which
	// stop tokens do not end the request, as vLLM's min_tokens.
	MinTokens int
	// Script, when set, are the first tokens generated, in order (what a
	// model that answers the prompt in a known way would write); the
	// output goes on as usual after it, or ends with FinishStop there
	// when ScriptEnds is set. MaxTokens still caps it.
	Script     []uint32
	ScriptEnds bool
	// Hold makes the request the prefill leg of a disaggregated request:
	// the step that computes the last prompt token ends it with one output
	// carrying the first generated token and FinishHeld, whatever
	// MaxTokens and stop tokens say, and its blocks stay held (counted in
	// use, never evicted; its full blocks in the prefix cache, published
	// as usual) until Release or Cancel frees them.
	Hold bool
	// FirstToken, when set, is the first generated token instead of the
	// one the engine would pick: the token a prefill leg sampled, relayed
	// with its KV.
	FirstToken *uint32
	// Arrived says the prompt's KV was computed elsewhere and received (a
	// decode leg's transfer): when the request is first considered for
	// admission the prompt's full blocks the prefix cache lacks are
	// stored, each as a block that entered the cache (stored events), so
	// that admission finds the prompt cached but for what a cached prompt
	// always computes (its last block). Usage counts as cached only the
	// prefix the engine held before the arrival.
	Arrived bool
	// PullLatency and PullPerBlock time an arrived prompt's transfer when
	// the engine pulls it: once the request is admitted, into the blocks
	// allocated for it, the arrived blocks take PullLatency plus
	// PullPerBlock each to come in, while the request holds its blocks and
	// computes nothing (StepResult.Pulled says when they are in); then it
	// runs once a running slot is free. This is the order of vLLM's decode
	// worker, which starts reading the remote KV once its scheduler has
	// allocated the blocks (with a running slot free then, which the
	// request does not take while its KV comes in: it waits outside the
	// running batch), and of SGLang's, which pre-allocates before the
	// transfer.
	// Both zero: the KV is in at admission (a caller that waited for the
	// transfer before Add). Durations of the link, not of compute: the
	// speed-up ratio does not divide them.
	PullLatency, PullPerBlock time.Duration
	// AwaitPull makes an arrived prompt's pull the caller's: once the
	// request is admitted (its blocks allocated; StepResult.PullStarts
	// names it with the arrived blocks to come in) it holds its blocks and
	// computes nothing until EndPull says its KV is in, however long the
	// caller's transfer takes or whether it fails (then Cancel). This is
	// how a worker that moves the KV itself (the mocker's pull from its
	// prefill worker) keeps the engine's order: admission, then the pull,
	// then a running slot. PullLatency and PullPerBlock are then unused.
	AwaitPull bool
	// Salt is the request's cache salt (empty: none): its blocks are
	// named by kvhash.SaltedHashes, so that it reuses only blocks cached
	// under the same salt, and publishes its own under salted hashes.
	Salt string
	// LoRA is the request's LoRA adapter (empty: the base model): it runs
	// once the adapter is loaded in one of the engine's slots (see
	// Config.MaxLoras), and its blocks are named by kvhash.ExtraHashes
	// with it, so that it shares no cached block with another adapter.
	LoRA string
}

// MaxLoRALen is the longest adapter name a request may carry, and
// MaxLoras the most adapter slots an engine may have.
const (
	MaxLoRALen = 256
	MaxLoras   = 1024
)

// MaxSaltLen is the longest cache salt a request may carry.
const MaxSaltLen = 1024

// FinishReason says why a request ended.
type FinishReason int

// The finish reasons.
const (
	// FinishNone means the request goes on.
	FinishNone FinishReason = iota
	// FinishLength means MaxTokens tokens were generated.
	FinishLength
	// FinishStop means a stop token was generated.
	FinishStop
	// FinishCancelled means the request was cancelled (Cancel or Reset).
	FinishCancelled
	// FinishHeld ends a prefill leg (Request.Hold): its prompt is computed
	// and its blocks are held for the decode leg to take (Release).
	FinishHeld
)

// String returns the reason's name.
func (r FinishReason) String() string {
	switch r {
	case FinishNone:
		return "none"
	case FinishLength:
		return "length"
	case FinishStop:
		return "stop"
	case FinishCancelled:
		return "cancelled"
	case FinishHeld:
		return "held"
	default:
		return "unknown"
	}
}

// Usage counts a request's tokens.
type Usage struct {
	// PromptTokens is the prompt's length.
	PromptTokens int
	// CompletionTokens is how many tokens were generated so far.
	CompletionTokens int
	// CachedPromptTokens is how much of the prompt the prefix cache held when
	// the request was first admitted.
	CachedPromptTokens int
}

// Output is what one request produced in one step.
type Output struct {
	// RequestID identifies the request.
	RequestID string
	// Tokens are the tokens generated in the step (at most one). The slice
	// is a view of the engine's memory that later steps never change: read
	// it at any time, never modify it.
	Tokens []uint32
	// Finish is set on the request's last output.
	Finish FinishReason
	// Usage counts the request's tokens after the step.
	Usage Usage
}

// StepResult is the outcome of one step.
type StepResult struct {
	// Duration is the simulated compute time of the step.
	Duration time.Duration
	// Outputs has one entry per request that generated a token or finished.
	Outputs []Output
	// Events are the KV cache events of the step, in id order.
	Events []Event
	// PrefillTokens is the number of new prompt tokens computed.
	PrefillTokens int
	// DecodeTokens is the number of requests that decoded one token.
	DecodeTokens int
	// Preempted is the number of requests preempted back to waiting.
	Preempted int
	// Admitted are the requests admitted for the first time in the step
	// (their wait in the queue ended; readmissions after a preemption are
	// not listed), in admission order.
	Admitted []string
	// LoraLoads counts the adapters loaded for the step.
	LoraLoads int
	// Chunks are the prompt chunks the step computed, one per request in
	// prefill, in the order it scheduled them; their tokens add up to
	// PrefillTokens. A caller can tell whose prompt made a step long.
	Chunks []Chunk
	// Pulled are the requests whose pull of arrived KV (Request.PullLatency,
	// PullPerBlock) ended in the step: the sender may free what it held
	// for them. A request pulling is never preempted; one cancelled
	// before its pull ends is not listed.
	Pulled []string
	// PullStarts are the requests admitted in the step whose pull is the
	// caller's (Request.AwaitPull), with the arrived blocks to pull (the
	// prompt's full blocks past the prefix the engine held): each waits
	// for its EndPull.
	PullStarts []PullStart
}

// PullStart is a request whose pull of arrived KV the caller now runs.
type PullStart struct {
	RequestID string
	Blocks    int
}

// Chunk is one request's prompt tokens computed in a step.
type Chunk struct {
	RequestID string
	Tokens    int
}

// Metrics is the engine's load, as published to the router.
type Metrics struct {
	// ActiveDecodeBlocks counts the blocks held by running requests past
	// their prefill.
	ActiveDecodeBlocks int
	// ActivePrefillTokens counts the prompt tokens running requests still
	// have to prefill.
	ActivePrefillTokens int
	// KVBlocksUsed counts the blocks held by running requests.
	KVBlocksUsed int
	// KVBlocksTotal is the cache's capacity in blocks.
	KVBlocksTotal int
	// CachedBlocks counts the full blocks in the prefix cache, held or not.
	CachedBlocks int
	// Waiting counts the requests queued for admission.
	Waiting int
	// Running counts the admitted requests.
	Running int
	// Requests lists every request, running first, then waiting, in order.
	Requests []RequestLoad
	// LoRAs are the adapters loaded in the engine's slots, least recently
	// used first.
	LoRAs []string
	// RequestsTotal and OutputTokensTotal are the requests accepted and
	// the tokens generated since the engine started (Stats' Requests and
	// GeneratedTokens): their ratio is its requests' mean output.
	RequestsTotal, OutputTokensTotal uint64
}

// RequestLoad is one request's share of the load.
type RequestLoad struct {
	ID string
	// PrefillTokens counts the prompt tokens it still has to prefill.
	PrefillTokens int
	// DecodeBlocks counts the blocks it holds while decoding.
	DecodeBlocks int
}

// Stats are the engine's cumulative counters.
type Stats struct {
	// Requests counts the requests accepted (Add).
	Requests uint64
	// Steps counts the steps that did any work.
	Steps uint64
	// PrefixQueriedBlocks counts the full prompt blocks looked up in the
	// prefix cache at each request's first admission (readmissions after a
	// preemption do not count).
	PrefixQueriedBlocks uint64
	// PrefixHitBlocks counts those found in the cache, on GPU or host.
	PrefixHitBlocks uint64
	// HostHitBlocks counts those of them loaded back from the host tier.
	HostHitBlocks uint64
	// PrefillTokens counts the prompt tokens computed.
	PrefillTokens uint64
	// GeneratedTokens counts the tokens generated.
	GeneratedTokens uint64
	// Preemptions counts the preemptions of running requests.
	Preemptions uint64
	// Elapsed is the sum of all step durations: the engine's simulated time.
	Elapsed time.Duration
	// LoraLoads counts the LoRA adapters loaded into a slot.
	LoraLoads uint64
	// EvictedBlocks counts the cached blocks evicted from the GPU (with a
	// host tier, each moved there); HostEvictedBlocks those the host tier
	// evicted in turn, lost. A workload whose cached blocks fit the GPU
	// evicts none; one that fits with the host tier evicts from the GPU
	// and hardly any from host.
	EvictedBlocks, HostEvictedBlocks uint64
}

// PrefixHitRate returns PrefixHitBlocks / PrefixQueriedBlocks, or 0 before
// any query.
func (s Stats) PrefixHitRate() float64 {
	if s.PrefixQueriedBlocks == 0 {
		return 0
	}
	return float64(s.PrefixHitBlocks) / float64(s.PrefixQueriedBlocks)
}

// request is the engine's state of one request.
type request struct {
	id        string
	tokens    []uint32 // prompt then generated tokens
	promptLen int
	maxTokens int
	minTokens int
	stop      []uint32
	seed      uint64
	// script and scriptEnds are Request's Script and ScriptEnds.
	script     []uint32
	scriptEnds bool
	// hold and first are Request's Hold and FirstToken.
	hold  bool
	first *uint32
	// arrived is Request.Arrived until the request is admitted, its
	// arrived blocks with it; localPrefix is then the prefix in blocks
	// the cache held, -1 for other requests.
	arrived     bool
	localPrefix int
	// computed counts the tokens whose KV is in the request's blocks.
	computed int
	blocks   []int32
	// hashes are the identities of the full blocks of tokens.
	hashes []kvhash.Block
	hasher *kvhash.Hasher
	// registered counts the leading blocks already offered to the cache.
	registered   int
	cachedPrompt int
	admittedOnce bool
	running      bool
	// scheduled is the number of tokens computed in the current step.
	scheduled int
	// loading is how long the copy of its prefix from the host tier
	// still runs (its wait for the link included): until it ends the
	// request holds its blocks and computes nothing (see hostTier).
	loading time.Duration
	// pulling is how long the pull of its arrived KV still runs (see
	// Request.PullLatency): until it ends the request holds its blocks
	// and computes nothing. pullLatency and pullPerBlock are the
	// request's.
	pulling                   time.Duration
	pullLatency, pullPerBlock time.Duration
	// awaitPull is Request.AwaitPull; once admitted, pulling is
	// awaitingPull until EndPull, and pullBlocks the arrived blocks.
	awaitPull  bool
	pullBlocks int
	// parked: its pull has ended and it waits for a running slot.
	parked bool
	// lora is Request.LoRA.
	lora string
}

func (r *request) generated() int { return len(r.tokens) - r.promptLen }

// finish says whether the request ends after generating tok.
func (r *request) finish(tok uint32) FinishReason {
	switch {
	case r.scriptEnds && r.generated() >= len(r.script):
		return FinishStop
	case r.generated() >= r.minTokens && slices.Contains(r.stop, tok):
		return FinishStop
	case r.generated() >= r.maxTokens:
		return FinishLength
	default:
		return FinishNone
	}
}

func (r *request) usage() Usage {
	return Usage{PromptTokens: r.promptLen, CompletionTokens: r.generated(), CachedPromptTokens: r.cachedPrompt}
}

// decoding says the request's prefill is over: only the last generated token
// lacks its KV.
func (r *request) decoding() bool {
	return r.generated() > 0 && r.computed == len(r.tokens)-1
}

// Engine is the simulated engine. Create one with New.
type Engine struct {
	cfg      Config
	pool     *pool
	requests map[string]*request
	waiting  []*request // FIFO; preempted requests go to the front
	running  []*request // in admission order
	// held are the prefill legs whose blocks wait for their decode leg
	// (Request.Hold), by id; not in requests.
	held       map[string]*request
	heldBlocks int
	nextID     uint64
	events     []Event
	stats      Stats
	// host is the host-memory tier; nil without one.
	host *hostTier
	// link is how long the host-to-GPU link is busy with the copies
	// already started: a new copy starts after them.
	link time.Duration
	// loras are the adapters loaded in the engine's slots, least recently
	// used first (see lora.go).
	loras []loraSlot
}

// New returns an empty engine, or an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, requests: make(map[string]*request), held: make(map[string]*request), nextID: 1}
	e.pool = newPool(cfg.NumGPUBlocks, e.evicted)
	e.host = newHostTier(cfg.NumHostBlocks)
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Add queues a request. It fails with ErrInvalidRequest, ErrDuplicateRequest
// or ErrRequestTooLarge. The engine copies what it keeps of r.
func (e *Engine) Add(r Request) error {
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: empty id", ErrInvalidRequest)
	case len(r.Prompt) == 0:
		return fmt.Errorf("%w: request %q has an empty prompt", ErrInvalidRequest, r.ID)
	case r.MaxTokens <= 0:
		return fmt.Errorf("%w: request %q has max tokens %d", ErrInvalidRequest, r.ID, r.MaxTokens)
	case r.MinTokens < 0:
		return fmt.Errorf("%w: request %q has min tokens %d", ErrInvalidRequest, r.ID, r.MinTokens)
	case r.LoRA != "" && e.cfg.MaxLoras == 0:
		return fmt.Errorf("%w: request %q names LoRA adapter %q and the engine serves none", ErrInvalidRequest, r.ID, r.LoRA)
	case len(r.LoRA) > MaxLoRALen:
		return fmt.Errorf("%w: request %q has a LoRA adapter name of %d bytes, more than %d", ErrInvalidRequest, r.ID, len(r.LoRA), MaxLoRALen)
	}
	if _, dup := e.requests[r.ID]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateRequest, r.ID)
	}
	if _, dup := e.held[r.ID]; dup {
		return fmt.Errorf("%w: %q (its blocks are held for a handoff)", ErrDuplicateRequest, r.ID)
	}
	bs := e.cfg.BlockSize
	maxTokens := r.MaxTokens
	if r.Hold {
		maxTokens = 1 // a prefill leg generates its first token only
	}
	// The last generated token's KV is never computed.
	if need := (len(r.Prompt) + maxTokens - 1 + bs - 1) / bs; need > e.cfg.NumGPUBlocks {
		return fmt.Errorf("%w: request %q needs %d blocks, the cache has %d",
			ErrRequestTooLarge, r.ID, need, e.cfg.NumGPUBlocks)
	}
	// Room for a typical answer; longer ones grow the slice. Outputs' token
	// views stay valid either way: handed-out positions are never rewritten.
	tokens := make([]uint32, len(r.Prompt), len(r.Prompt)+min(r.MaxTokens, 512))
	copy(tokens, r.Prompt)
	q := &request{
		id:          r.ID,
		tokens:      tokens,
		promptLen:   len(r.Prompt),
		maxTokens:   r.MaxTokens,
		minTokens:   r.MinTokens,
		stop:        slices.Clone(r.StopTokenIDs),
		script:      r.Script,
		scriptEnds:  r.ScriptEnds && len(r.Script) > 0,
		seed:        tokenSeed(r.Prompt, r.Seed),
		hasher:      kvhash.NewExtraHasher(bs, kvhash.Extra{Salt: r.Salt, LoRA: r.LoRA}),
		lora:        r.LoRA,
		hold:        r.Hold,
		localPrefix: -1,
	}
	if r.FirstToken != nil {
		first := *r.FirstToken
		q.first = &first
	}
	q.hashes = q.hasher.Append(tokens, make([]kvhash.Block, 0, cap(tokens)/bs))
	q.arrived = r.Arrived
	q.pullLatency, q.pullPerBlock = r.PullLatency, r.PullPerBlock
	q.awaitPull = r.Arrived && r.AwaitPull
	e.requests[r.ID] = q
	e.waiting = append(e.waiting, q)
	e.stats.Requests++
	return nil
}

// Cancel ends a request at once, releasing its blocks (which stay cached
// until evicted), and returns its final output; a prefill leg whose blocks
// are held is released. It fails with ErrUnknownRequest.
func (e *Engine) Cancel(id string) (Output, error) {
	if r, ok := e.held[id]; ok {
		e.releaseHeld(r)
		return Output{RequestID: id, Finish: FinishCancelled, Usage: r.usage()}, nil
	}
	r, ok := e.requests[id]
	if !ok {
		return Output{}, fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	if r.running {
		e.running = removeRequest(e.running, r)
		e.doneLoRA(r)
		e.releaseBlocks(r)
	} else {
		e.waiting = removeRequest(e.waiting, r)
	}
	delete(e.requests, id)
	return Output{RequestID: id, Finish: FinishCancelled, Usage: r.usage()}, nil
}

func removeRequest(list []*request, r *request) []*request {
	for i, q := range list {
		if q == r {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// Reset cancels every request and empties the KV cache. The result has a
// cancelled output per request and one EventCleared event.
func (e *Engine) Reset() StepResult {
	var res StepResult
	for _, list := range [][]*request{e.running, e.waiting} {
		for _, r := range list {
			res.Outputs = append(res.Outputs, Output{RequestID: r.id, Finish: FinishCancelled, Usage: r.usage()})
		}
	}
	e.running, e.waiting, e.loras = nil, nil, nil
	clear(e.requests)
	clear(e.held)
	e.heldBlocks = 0
	e.pool.clear()
	if e.host != nil {
		e.host.clear()
	}
	e.emit(Event{Kind: EventCleared})
	res.Events = e.takeEvents()
	return res
}

// CachedPrefix returns how many leading blocks of a sequence (as computed by
// kvhash.Hashes) the prefix cache holds: the ground truth a router's
// overlap estimate for this engine can be checked against.
func (e *Engine) CachedPrefix(blocks []kvhash.Block) int {
	for i, b := range blocks {
		if _, ok := e.pool.lookup(b.Sequence); !ok {
			return i
		}
	}
	return len(blocks)
}

// Idle says the engine has no request: Step would do nothing.
func (e *Engine) Idle() bool { return len(e.requests) == 0 }

// Stats returns the cumulative counters.
func (e *Engine) Stats() Stats { return e.stats }

// Metrics returns the current load.
func (e *Engine) Metrics() Metrics {
	m := Metrics{
		KVBlocksUsed:  e.pool.inUse,
		KVBlocksTotal: e.cfg.NumGPUBlocks,
		CachedBlocks:  len(e.pool.cache),
		Waiting:       len(e.waiting),
		Running:       len(e.running),
	}
	m.Requests = make([]RequestLoad, 0, len(e.running)+len(e.waiting))
	for _, r := range e.running {
		if r.decoding() {
			m.ActiveDecodeBlocks += len(r.blocks)
			m.Requests = append(m.Requests, RequestLoad{ID: r.id, DecodeBlocks: len(r.blocks)})
		} else {
			m.ActivePrefillTokens += len(r.tokens) - r.computed
			m.Requests = append(m.Requests, RequestLoad{ID: r.id, PrefillTokens: len(r.tokens) - r.computed})
		}
	}
	for _, r := range e.waiting {
		m.Requests = append(m.Requests, RequestLoad{ID: r.id, PrefillTokens: len(r.tokens) - r.computed})
	}
	m.LoRAs = e.LoadedLoRAs()
	m.RequestsTotal, m.OutputTokensTotal = e.stats.Requests, e.stats.GeneratedTokens
	return m
}

// Step schedules and runs one batch, and returns what it produced and how
// long it took. With no request it returns a zero result.
func (e *Engine) Step() StepResult {
	var res StepResult
	if e.Idle() {
		return res
	}
	budget := e.cfg.MaxNumBatchedTokens
	var prefill, decode int
	// attn is the step's attention term: each prompt chunk's tokens
	// attend to its own sequence's tokens before them (Timing).
	var attn float64

	// A request whose KV is being pulled, or pulled and waiting for a
	// running slot, holds its blocks outside the running batch (vLLM
	// keeps it in its waiting queue): the batch's slots are the others'.
	// Pulled ones take the slots free, in admission order.
	active := 0
	for _, r := range e.running {
		if r.pulling == 0 && !r.parked {
			active++
		}
	}
	for _, r := range e.running {
		if r.parked && active < e.cfg.MaxNumSeqs {
			r.parked = false
			active++
		}
	}

	// Running requests first, in admission order; victims of preemption
	// come from the end, which has not been scheduled yet.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		if r.loading > 0 || r.pulling > 0 || r.parked {
			continue // copying its prefix from host, pulling, or waiting for a slot
		}
		n := min(len(r.tokens)-r.computed, budget)
		if !e.allocate(r, n) {
			res.Preempted += e.preemptFor(r, n)
			if !r.running {
				break // r itself was preempted: it was the last one.
			}
		}
		r.scheduled = n
		budget -= n
		if r.decoding() {
			decode++
		} else {
			prefill += n
			attn += timingmodel.Attention(r.computed, n)
			res.Chunks = append(res.Chunks, Chunk{RequestID: r.id, Tokens: n})
		}
	}

	// Then waiting requests, FIFO, unless this step had to preempt. A
	// request whose adapter has no slot this step is passed over, as vLLM
	// does, and keeps its place.
	var loads int
	for i := 0; res.Preempted == 0 && i < len(e.waiting) && active < e.cfg.MaxNumSeqs && budget > 0; {
		r := e.waiting[i]
		if r.lora != "" && !e.loraFits(r.lora) {
			i++
			continue
		}
		first := !r.admittedOnce
		n, ok := e.admit(r, budget)
		if !ok {
			break
		}
		if r.lora != "" && e.useLoRA(r.lora) {
			loads++
		}
		if first {
			res.Admitted = append(res.Admitted, r.id)
		}
		if i == 0 {
			e.waiting = e.waiting[1:]
		} else {
			e.waiting = slices.Delete(e.waiting, i, i+1)
		}
		e.running = append(e.running, r)
		if r.pulling == 0 {
			active++
		}
		if r.pulling == awaitingPull {
			res.PullStarts = append(res.PullStarts, PullStart{RequestID: r.id, Blocks: r.pullBlocks})
		}
		if r.loading > 0 || r.pulling > 0 {
			// Its copy from host or its pull runs beside this step: its
			// chunk is computed once that is done.
			continue
		}
		r.scheduled = n
		budget -= n
		prefill += n
		attn += timingmodel.Attention(r.computed, n)
		res.Chunks = append(res.Chunks, Chunk{RequestID: r.id, Tokens: n})
	}

	// Run the batch: KV computed, full blocks cached, tokens generated.
	res.Outputs = make([]Output, 0, len(e.running))
	usage := float64(e.pool.inUse) / float64(e.cfg.NumGPUBlocks)
	kept := e.running[:0]
	for _, r := range e.running {
		if r.scheduled == 0 {
			kept = append(kept, r)
			continue
		}
		r.computed += r.scheduled
		r.scheduled = 0
		e.registerFull(r)
		if r.computed < len(r.tokens) {
			kept = append(kept, r) // mid-prefill chunk: no token yet
			continue
		}
		var tok uint32
		if g := r.generated(); g == 0 && r.first != nil {
			tok = *r.first
		} else if g < len(r.script) {
			tok = r.script[g]
		} else if len(e.cfg.OutputText) > 0 {
			tok = textToken(r.seed, r.generated(), e.cfg.OutputText)
		} else {
			tok = outputToken(r.seed, r.generated(), e.cfg.OutputTokenMin, e.cfg.OutputTokenMax)
		}
		r.tokens = append(r.tokens, tok)
		r.hashes = r.hasher.Append(r.tokens[len(r.tokens)-1:], r.hashes)
		e.stats.GeneratedTokens++
		// A capped view of the token list: later appends cannot show
		// through it, and the step allocates nothing per token.
		out := Output{RequestID: r.id, Tokens: r.tokens[len(r.tokens)-1 : len(r.tokens) : len(r.tokens)]}
		if r.hold {
			out.Finish = FinishHeld
			e.doneLoRA(r)
			r.running = false
			delete(e.requests, r.id)
			e.held[r.id] = r
			e.heldBlocks += len(r.blocks)
		} else if fin := r.finish(tok); fin != FinishNone {
			out.Finish = fin
			e.doneLoRA(r)
			e.releaseBlocks(r)
			delete(e.requests, r.id)
		} else {
			kept = append(kept, r)
		}
		out.Usage = r.usage()
		res.Outputs = append(res.Outputs, out)
	}
	clear(e.running[len(kept):])
	e.running = kept

	res.Duration += stepTime(prefill, attn, decode > 0, usage, e.cfg.SpeedupRatio)
	if loads > 0 {
		res.Duration += scale(float64(loads)*e.cfg.LoraLoadMs, e.cfg.SpeedupRatio)
		res.LoraLoads = loads
		e.stats.LoraLoads += uint64(loads)
	}
	e.pull(&res, prefill == 0 && decode == 0)
	e.copyFromHost(&res)
	res.PrefillTokens, res.DecodeTokens = prefill, decode
	res.Events = e.takeEvents()
	e.stats.Steps++
	e.stats.PrefillTokens += uint64(prefill)
	e.stats.Preemptions += uint64(res.Preempted)
	e.stats.Elapsed += res.Duration
	return res
}

// pull lets the step's time pass for the pulls of arrived KV: a request
// whose pull ends with the step has its arrived blocks stored then and
// computes from the next step. A step that computed nothing (idle) while
// pulls run lasts until the first ends (or a copy from host does, see
// copyFromHost).
func (e *Engine) pull(res *StepResult, idle bool) {
	first := time.Duration(-1)
	for _, r := range e.running {
		if r.pulling > 0 && r.pulling != awaitingPull && (first < 0 || r.pulling < first) {
			first = r.pulling
		}
	}
	if first < 0 {
		return
	}
	if idle && res.Duration == 0 {
		res.Duration = first
		for _, r := range e.running {
			if r.loading > 0 {
				res.Duration = min(res.Duration, r.loading)
			}
		}
	}
	for _, r := range e.running {
		if r.pulling <= 0 || r.pulling == awaitingPull {
			continue
		}
		r.pulling = max(r.pulling-res.Duration, 0)
		if r.pulling == 0 {
			e.registerFull(r)
			r.parked = true // it runs once a slot is free (Step)
			res.Pulled = append(res.Pulled, r.id)
		}
	}
}

// awaitingPull is the pull time of a request whose pull is the caller's
// (Request.AwaitPull): it lasts until EndPull.
const awaitingPull = time.Duration(math.MaxInt64)

// EndPull says that the arrived KV of a request whose pull is the caller's
// (Request.AwaitPull, admitted: StepResult.PullStarts named it) is in: its
// arrived blocks are stored (stored events with the next step's) and it
// runs once a running slot is free. It fails with ErrUnknownRequest for a
// request that is not waiting for its pull (never such a request, not yet
// admitted, already ended, finished or cancelled).
func (e *Engine) EndPull(id string) error {
	r, ok := e.requests[id]
	if !ok || !r.running || r.pulling != awaitingPull {
		return fmt.Errorf("%w: %q awaits no pull", ErrUnknownRequest, id)
	}
	r.pulling = 0
	e.registerFull(r)
	r.parked = true // it runs once a slot is free (Step)
	return nil
}

// blocksFor returns how many blocks hold n tokens.
func (e *Engine) blocksFor(n int) int { return (n + e.cfg.BlockSize - 1) / e.cfg.BlockSize }

// allocate gives a running request the blocks for n more tokens, or nothing
// when they are not all available.
func (e *Engine) allocate(r *request, n int) bool {
	need := e.blocksFor(r.computed+n) - len(r.blocks)
	if need <= 0 {
		return true
	}
	if need > e.pool.available() {
		return false
	}
	for range need {
		b, _ := e.pool.alloc()
		r.blocks = append(r.blocks, b)
	}
	return true
}

// preemptFor preempts running requests from the most recently admitted until
// r gets the blocks for n tokens or r itself is preempted, and returns how
// many it preempted.
func (e *Engine) preemptFor(r *request, n int) int {
	count := 0
	for {
		// The latest admitted is the victim, passing over requests whose
		// KV is being pulled or waits for a slot: those wait outside the
		// running batch in vLLM (r, being scheduled, is never one).
		j := len(e.running) - 1
		for e.running[j].pulling > 0 || e.running[j].parked {
			j--
		}
		victim := e.running[j]
		e.running = slices.Delete(e.running, j, j+1)
		e.preempt(victim)
		count++
		if victim == r || e.allocate(r, n) {
			return count
		}
	}
}

// preempt releases a running request's blocks and puts it at the front of
// the waiting queue, to recompute everything it had.
func (e *Engine) preempt(r *request) {
	e.releaseBlocks(r)
	r.loading = 0
	e.doneLoRA(r)
	r.computed, r.registered, r.scheduled = 0, 0, 0
	r.running = false
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = r
}

// admit looks up a waiting request's cached prefix and allocates the blocks
// of its first chunk within budget. It returns the chunk's size, or false
// when the blocks are not available.
func (e *Engine) admit(r *request, budget int) (int, bool) {
	bs := e.cfg.BlockSize
	// At least the last token is computed, for the logits of the next one.
	maxHit := (len(r.tokens) - 1) / bs
	hits := 0
	evictableHits := 0
	for hits < maxHit {
		b, ok := e.pool.lookup(r.hashes[hits].Sequence)
		if !ok {
			break
		}
		if e.pool.blocks[b].ref == 0 {
			evictableHits++
		}
		hits++
	}
	// An arrived prompt's full blocks past the cached prefix come in with
	// the request, into blocks allocated for them here: they take room
	// as computed ones, and until the request is admitted they are not
	// the engine's (vLLM's decode worker allocates the blocks of the
	// remote KV when it schedules the request, SGLang's pre-allocates
	// before the transfer; neither stores the KV in its cache before).
	arrived := 0
	if r.arrived {
		arrived = max(min(r.promptLen/bs, maxHit)-hits, 0)
	}
	// The prefix goes on in the host tier: those blocks are loaded back,
	// not computed.
	loads := 0
	for e.host != nil && hits+arrived+loads < maxHit && e.host.has(r.hashes[hits+arrived+loads].Sequence) {
		loads++
	}
	n := min(len(r.tokens)-(hits+arrived+loads)*bs, budget)
	need := e.blocksFor((hits+arrived+loads)*bs+n) - hits
	if need > e.pool.available()-evictableHits {
		return 0, false
	}
	pulls := false
	if r.arrived {
		r.arrived = false
		r.localPrefix = hits
		pulls = r.awaitPull || r.pullLatency > 0 || r.pullPerBlock > 0
	}
	for i := range hits {
		b, _ := e.pool.lookup(r.hashes[i].Sequence)
		e.pool.acquire(b)
		r.blocks = append(r.blocks, b)
	}
	// Loaded blocks leave the host before the allocation below evicts
	// GPU blocks into it, which could push them out.
	for i := hits + arrived; i < hits+arrived+loads; i++ {
		e.host.take(r.hashes[i].Sequence)
	}
	for range need {
		b, _ := e.pool.alloc()
		r.blocks = append(r.blocks, b)
	}
	if pulls {
		// Its KV comes in now, into the blocks just allocated: for as
		// long as the link takes, or until the caller's EndPull.
		r.pulling = r.pullLatency + time.Duration(arrived)*r.pullPerBlock
		if r.awaitPull {
			r.pulling, r.pullBlocks = awaitingPull, arrived
		}
	}
	if arrived > 0 {
		// The arrived blocks enter the cache as computed ones do: stored
		// events, as if the engine had computed them (once pulled, when
		// pulled: see pull).
		r.computed = (hits + arrived) * bs
		r.registered = hits
		if r.pulling == 0 {
			e.registerFull(r)
		}
		hits += arrived
	}
	if loads > 0 {
		r.computed = (hits + loads) * bs
		r.registered = hits
		if r.pulling == 0 {
			e.registerFull(r) // back on GPU: stored events, on KV_MEDIUM_GPU
		}
		e.startCopy(r, loads*bs)
		e.stats.HostHitBlocks += uint64(loads)
		hits += loads
	}
	r.computed = hits * bs
	r.registered = hits
	if r.pulling > 0 {
		// Stored once pulled (see pull).
		r.registered = r.localPrefix
	}
	r.running = true
	if !r.admittedOnce {
		// Hits count at first admission only: a preempted request finding
		// its own blocks again on readmission is not prefix reuse.
		r.admittedOnce = true
		r.cachedPrompt = min(hits*bs, r.promptLen)
		if r.localPrefix >= 0 {
			// Blocks that arrived were computed, elsewhere.
			r.cachedPrompt = min(min(hits, r.localPrefix)*bs, r.promptLen)
		}
		e.stats.PrefixQueriedBlocks += uint64(r.promptLen / bs)
		e.stats.PrefixHitBlocks += uint64(min(hits, r.promptLen/bs))
	}
	return n, true
}

// registerFull offers the request's newly computed full blocks to the prefix
// cache, emitting one stored event per run of blocks that entered it.
func (e *Engine) registerFull(r *request) {
	full := r.computed / e.cfg.BlockSize
	var ev *Event
	for i := r.registered; i < full; i++ {
		id := r.hashes[i]
		if !e.pool.register(r.blocks[i], id) {
			ev = nil // a duplicate of a cached block: the run breaks here
			continue
		}
		e.unhost(id.Sequence)
		if ev == nil {
			e.emit(Event{Kind: EventStored})
			ev = &e.events[len(e.events)-1]
			if i > 0 {
				ev.Parent, ev.HasParent = r.hashes[i-1].Sequence, true
			}
		}
		ev.Blocks = append(ev.Blocks, id)
	}
	r.registered = max(r.registered, full)
}

// Release frees the blocks a prefill leg holds (Request.Hold) for its
// handoff and returns how many it held; its full blocks stay cached until
// evicted. It fails with ErrUnknownRequest for an id whose blocks are not
// held (never a prefill leg, still computing, or already released).
func (e *Engine) Release(id string) (int, error) {
	r, ok := e.held[id]
	if !ok {
		return 0, fmt.Errorf("%w: %q holds no blocks", ErrUnknownRequest, id)
	}
	n := len(r.blocks)
	e.releaseHeld(r)
	return n, nil
}

// HeldBlocks counts the blocks prefill legs hold for their handoffs.
func (e *Engine) HeldBlocks() int { return e.heldBlocks }

func (e *Engine) releaseHeld(r *request) {
	e.heldBlocks -= len(r.blocks)
	delete(e.held, r.id)
	e.releaseBlocks(r)
}

// releaseBlocks drops a request's hold on its blocks, last block first so
// that a sequence's tail is evicted before its head (as vLLM does).
func (e *Engine) releaseBlocks(r *request) {
	for i := len(r.blocks) - 1; i >= 0; i-- {
		e.pool.release(r.blocks[i])
	}
	r.blocks = r.blocks[:0]
}

// evicted records the eviction of a cached block, merging consecutive
// evictions into one removed event.
func (e *Engine) evicted(id kvhash.Block) {
	e.stats.EvictedBlocks++
	if e.host != nil {
		e.offload(id)
		return
	}
	seq := id.Sequence
	if n := len(e.events); n > 0 && e.events[n-1].Kind == EventRemoved {
		e.events[n-1].Removed = append(e.events[n-1].Removed, seq)
		return
	}
	e.emit(Event{Kind: EventRemoved, Removed: []uint64{seq}})
}

// emit appends an event with the next id.
func (e *Engine) emit(ev Event) {
	if e.host != nil && ev.Kind != EventCleared && ev.Medium == workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED {
		// With a host tier every event says its medium.
		ev.Medium = workerv1.KvMedium_KV_MEDIUM_GPU
	}
	ev.ID = e.nextID
	e.nextID++
	e.events = append(e.events, ev)
}

// takeEvents hands the pending events to the caller.
func (e *Engine) takeEvents() []Event {
	evs := e.events
	e.events = nil
	return evs
}
