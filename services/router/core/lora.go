package core

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// MaxLoRANameLen is the longest LoRA adapter name a request may carry.
const MaxLoRANameLen = 256

// ValidLoRAName reports whether name may be a request's LoRA adapter: 1 to
// MaxLoRANameLen bytes of UTF-8 with no control character. Whether a worker
// serves it is the decision's business, not the name's.
func ValidLoRAName(name string) error {
	if name == "" || len(name) > MaxLoRANameLen || !utf8.ValidString(name) {
		return fmt.Errorf("%w: lora_name must be 1..%d bytes of UTF-8", ErrInvalid, MaxLoRANameLen)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: lora_name has a control character", ErrInvalid)
		}
	}
	return nil
}

// adapters is what the core knows of LoRA adapters: which adapters each
// instance's model cards list (only those instances are candidates for a
// request with the adapter) and how many slots they declare, which each
// worker reported loaded, and which requests routed to each worker run
// with one. A worker counts as having an adapter loaded while its last
// load report lists it or a request routed there with it runs: the engine
// loads the adapter to serve the request and keeps it loaded while the
// request runs, so a burst of requests for one adapter is priced as one
// load, before any report says so.
type adapters struct {
	// serves is, per instance, per model name, the adapters its card
	// lists; slots is, per instance, the most adapters its cards say one
	// engine holds loaded at once (max_loras; absent: unknown). Both
	// under Core.mu.
	serves map[uint64]map[string]adapterCard
	slots  map[uint64]int

	mu sync.Mutex
	// workers is each worker's adapter state: one lookup per candidate
	// at a decision.
	workers map[index.WorkerID]*adapterWorker
	// byRequest names each running adapter request's worker and adapter.
	byRequest map[string]routedAdapter
	// inFlight is len(byRequest), read without mu so that freeing a
	// request without an adapter costs no lock.
	inFlight atomic.Int64
}

// adapterWorker is one worker's adapters: those its last load report
// listed, those its running requests use, and how long a request runs
// there once it has its first token.
//
// A decision prices every candidate for its request's adapter, whose
// loraKey it computes once: the loaded and running adapters are found by
// key (a name is read only when its key matches), and each set has a
// 64-bit summary, bit loraKey%64 of each member's key, so that a
// candidate which neither has the adapter loaded nor runs it (most of
// them, with many adapters over few slots) is told by two bit tests.
type adapterWorker struct {
	loaded []string
	// loadedKeys are loaded's names' loraKey, in its order.
	loadedKeys []uint64
	// loadedBits is the summary of loadedKeys (see keyBit).
	loadedBits uint64
	// running is, per adapter, the routed requests that run with it, in
	// no order (price ranks them); runningBits is its keys' summary.
	running     []runningAdapter
	runningBits uint64
	// runMs is how long a request decodes on the worker, on average,
	// predicted at its last load report: its requests' mean output (the
	// report's output tokens over its requests, since the worker started)
	// times a decode step of its timing model at the report's KV usage.
	// 0: unknown.
	runMs float64
}

// runningAdapter is an adapter with requests running on a worker: its
// name, its loraKey and the requests (at least one).
type runningAdapter struct {
	name string
	key  uint64
	reqs []adapterRequest
}

// keyBit is an adapter key's bit in a set's summary.
func keyBit(key uint64) uint64 { return 1 << (key % 64) }

// adapterRequest is a running request with an adapter, when it was routed
// and when its first token is predicted.
type adapterRequest struct {
	id        string
	at, first time.Time
}

// routedAdapter is a running request's worker and adapter.
type routedAdapter struct {
	w    index.WorkerID
	name string
	key  uint64
}

func newAdapters() *adapters {
	return &adapters{
		serves:    map[uint64]map[string]adapterCard{},
		slots:     map[uint64]int{},
		workers:   map[index.WorkerID]*adapterWorker{},
		byRequest: map[string]routedAdapter{},
	}
}

// adapterCard is what one model card says of adapters: the names it
// lists and its slots (max_loras).
type adapterCard struct {
	names []string
	slots int
}

// cardLocked records (or, deleted, forgets) the adapters a model card
// lists and its slots; under Core.mu.
func (a *adapters) cardLocked(card *registryv1.ModelCard, deleted bool) {
	id := card.GetInstanceId()
	models := a.serves[id]
	if deleted || len(card.GetLoraAdapters()) == 0 {
		if models != nil {
			delete(models, card.GetModelName())
			if len(models) == 0 {
				delete(a.serves, id)
			}
		}
	} else {
		names := make([]string, 0, len(card.GetLoraAdapters()))
		for _, l := range card.GetLoraAdapters() {
			names = append(names, l.GetName())
		}
		if models == nil {
			models = map[string]adapterCard{}
			a.serves[id] = models
		}
		models[card.GetModelName()] = adapterCard{names: names, slots: int(card.GetMaxLoras())}
	}
	slots := 0
	for _, m := range a.serves[id] {
		slots = max(slots, m.slots)
	}
	if slots > 0 {
		a.slots[id] = slots
	} else {
		delete(a.slots, id)
	}
}

// servesLocked says whether an instance's card for model (any of its
// cards when model is empty: an endpoint target) lists the adapter; under
// Core.mu.
func (a *adapters) servesLocked(id uint64, model, name string) bool {
	if model != "" {
		return slices.Contains(a.serves[id][model].names, name)
	}
	for _, m := range a.serves[id] {
		if slices.Contains(m.names, name) {
			return true
		}
	}
	return false
}

// workerLocked is w's state, made if it has none; under a.mu.
func (a *adapters) workerLocked(w index.WorkerID) *adapterWorker {
	st := a.workers[w]
	if st == nil {
		st = &adapterWorker{}
		a.workers[w] = st
	}
	return st
}

// candidatesLocked gives a target's candidates (ids their workers) their
// adapter state, made for those without one, and their slots. Under
// Core.mu, as the state of an instance is forgotten only once it is no
// candidate (removeInstance comes after the registry change that drops it
// from every target).
func (a *adapters) candidatesLocked(cands []candidate, ids []index.WorkerID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range cands {
		cands[i].lora = a.workerLocked(ids[i])
		cands[i].loraSlots = a.slots[ids[i].Instance]
	}
}

// report keeps a worker's reported adapters and how long its requests
// run (see adapterWorker.runMs).
func (a *adapters) report(w index.WorkerID, names []string, runMs float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.workerLocked(w)
	st.setLoaded(names)
	st.runMs = runMs
}

// setLoaded keeps names as the adapters the worker has loaded.
func (st *adapterWorker) setLoaded(names []string) {
	st.loaded = append(st.loaded[:0], names...)
	st.loadedKeys = st.loadedKeys[:0]
	st.loadedBits = 0
	for _, n := range names {
		k := loraKey(n)
		st.loadedKeys = append(st.loadedKeys, k)
		st.loadedBits |= keyBit(k)
	}
}

// isLoaded says whether the worker has the adapter name (whose loraKey is
// key) loaded.
func (st *adapterWorker) isLoaded(name string, key uint64) bool {
	if st.loadedBits&keyBit(key) == 0 {
		return false
	}
	for i, k := range st.loadedKeys {
		if k == key && st.loaded[i] == name {
			return true
		}
	}
	return false
}

// runningIndex is the position in running of the adapter name (whose
// loraKey is key), or -1 when no request runs with it.
func (st *adapterWorker) runningIndex(name string, key uint64) int {
	if st.runningBits&keyBit(key) == 0 {
		return -1
	}
	for i := range st.running {
		if st.running[i].key == key && st.running[i].name == name {
			return i
		}
	}
	return -1
}

// addRunning records a request running with the adapter name (whose
// loraKey is key).
func (st *adapterWorker) addRunning(name string, key uint64, q adapterRequest) {
	if i := st.runningIndex(name, key); i >= 0 {
		st.running[i].reqs = append(st.running[i].reqs, q)
		return
	}
	st.running = append(st.running, runningAdapter{name: name, key: key, reqs: []adapterRequest{q}})
	st.runningBits |= keyBit(key)
}

// dropRunning forgets the running request id with the adapter name (whose
// loraKey is key), and the adapter once no request runs with it.
func (st *adapterWorker) dropRunning(name string, key uint64, id string) {
	i := st.runningIndex(name, key)
	if i < 0 {
		return
	}
	reqs := st.running[i].reqs
	if j := slices.IndexFunc(reqs, func(q adapterRequest) bool { return q.id == id }); j >= 0 {
		reqs[j] = reqs[len(reqs)-1]
		reqs = reqs[:len(reqs)-1]
	}
	st.running[i].reqs = reqs
	if len(reqs) > 0 {
		return
	}
	last := len(st.running) - 1
	st.running[i] = st.running[last]
	st.running[last] = runningAdapter{}
	st.running = st.running[:last]
	st.runningBits = 0
	for _, r := range st.running {
		st.runningBits |= keyBit(r.key)
	}
}

// loraKey is an adapter name's key, which a decision computes once for
// its request and compares with each candidate's loaded adapters'
// (adapterWorker.loadedKeys) instead of their names. The first
// maxDenseLoRAKeys names the process sees are numbered densely in that
// order, so that the first 64 have a summary bit each (keyBit) and a
// worker's summaries tell exactly whether it has one of them loaded or
// running: with hashed keys, a few of a fleet's adapters shared bits with
// any other, and every candidate with such a one loaded took the full
// price. Names past those are hashed into keys no number takes (the top
// bit set), as a fleet with more adapters than that shares bits anyway,
// and the table stops growing.
func loraKey(name string) uint64 { return loraKeys.key(name) }

// maxDenseLoRAKeys is how many adapter names loraKey numbers.
const maxDenseLoRAKeys = 4096

// loraKeys is loraKey's table.
var loraKeys = newLoRAKeyTable(maxDenseLoRAKeys)

// loraKeyTable numbers the first max names it is asked for densely and
// hashes the rest into keys with the top bit set.
type loraKeyTable struct {
	mu    sync.Mutex
	dense map[string]uint64
	max   int
	seed  maphash.Seed
}

func newLoRAKeyTable(max int) *loraKeyTable {
	return &loraKeyTable{dense: map[string]uint64{}, max: max, seed: maphash.MakeSeed()}
}

func (t *loraKeyTable) key(name string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k, ok := t.dense[name]; ok {
		return k
	}
	if len(t.dense) >= t.max {
		return maphash.String(t.seed, name) | 1<<63
	}
	k := uint64(len(t.dense))
	t.dense[name] = k
	return k
}

// price is what a request with the adapter name (whose loraKey is key)
// meets on the worker (st, nil for none) with slots adapter slots (0:
// unknown): whether it must load the adapter, and how long from now it
// waits for a slot first.
//
// An engine runs requests of at most slots adapters at once: a request
// whose adapter is not among those of its running requests waits while
// every slot is taken (vLLM's scheduler passes it over), and the
// adapter is loaded when it gets one, unless still loaded from before.
// The adapters of the requests routed to the worker take the slots in
// order: those its last report listed loaded first (they hold theirs),
// then by their first request's routing. A request for an adapter among
// the first slots of them neither loads nor waits. Any other waits until
// enough of the adapters ahead of it have no request left: as many as
// the slots are short for it and them (the adapters ahead, it, less the
// slots), the earliest to end first (see adapterEndMs). It loads the
// adapter unless the worker's report lists it. With slots unknown, no
// wait is predicted.
func (st *adapterWorker) price(name string, key uint64, slots int, now time.Time) (load bool, waitMs float64) {
	if st.loadsNow(key, slots) {
		return true, 0
	}
	return st.priceRunning(name, key, slots, now)
}

// loadsNow says, from the summaries alone, that a request with the
// adapter whose loraKey is key loads it and waits for no slot on the
// worker (st, nil for none) with slots adapter slots: the worker has no
// state, or neither has it loaded nor runs it and has a slot for it.
// Small enough to inline where a decision prices every candidate.
func (st *adapterWorker) loadsNow(key uint64, slots int) bool {
	bit := keyBit(key)
	return st == nil || st.loadedBits&bit == 0 && st.runningBits&bit == 0 && (slots <= 0 || len(st.running) < slots)
}

// priceRunning is price for a worker with state (st not nil).
func (st *adapterWorker) priceRunning(name string, key uint64, slots int, now time.Time) (load bool, waitMs float64) {
	loaded := st.isLoaded(name, key)
	n := len(st.running)
	if n == 0 {
		return !loaded, 0
	}
	running := st.runningIndex(name, key) >= 0
	if slots <= 0 || n < slots || (running && n == slots) {
		// A slot for every adapter routed there, this one included.
		return !loaded && !running, 0
	}
	var buf [16]adapterRank
	ranks := buf[:0]
	for i := range st.running {
		ranks = append(ranks, st.rankOf(&st.running[i]))
	}
	slices.SortFunc(ranks, adapterRank.compare)
	ahead := n // a new adapter comes after every one routed there
	if running {
		ahead = slices.IndexFunc(ranks, func(r adapterRank) bool { return r.name == name })
		if ahead < slots {
			return false, 0
		}
	}
	var ebuf [16]float64
	ends := ebuf[:0]
	for _, r := range ranks[:ahead] {
		ends = append(ends, adapterEndMs(r, st.runMs, now))
	}
	slices.Sort(ends)
	return !loaded, ends[ahead-slots]
}

// adapterEndMs is when, in ms from now, the last of an adapter's running
// requests is expected to end on a worker whose requests decode for runMs
// on average. The router knows a request's mean length, not its own, nor
// how far a running one has got: with only a mean known, a request's
// remaining time is taken as memoryless (exponential: what is left of it
// is runMs on average however long it has run; a request predicted to
// end by now has not). The last of k such requests ends after H(k) =
// 1 + 1/2 + ... + 1/k means (the expected largest of k exponentials),
// counted from the latest of their first tokens (or now, when all have
// come).
func adapterEndMs(r adapterRank, runMs float64, now time.Time) float64 {
	h := 0.0
	for i := 1; i <= r.requests; i++ {
		h += 1 / float64(i)
	}
	return max(float64(r.start.Sub(now))/float64(time.Millisecond), 0) + runMs*h
}

// adapterRank is an adapter routed to a worker, as price orders them:
// listed loaded by the worker's report first, then by its first request's
// routing (then name, for a total order). start is the latest predicted
// first token of its requests, requests how many run.
type adapterRank struct {
	name         string
	loaded       bool
	first, start time.Time
	requests     int
}

func (st *adapterWorker) rankOf(ra *runningAdapter) adapterRank {
	reqs := ra.reqs
	r := adapterRank{name: ra.name, loaded: st.isLoaded(ra.name, ra.key), first: reqs[0].at, start: reqs[0].first, requests: len(reqs)}
	for _, q := range reqs[1:] {
		if q.at.Before(r.first) {
			r.first = q.at
		}
		if q.first.After(r.start) {
			r.start = q.first
		}
	}
	return r
}

func (a adapterRank) compare(b adapterRank) int {
	switch {
	case a.loaded != b.loaded:
		if a.loaded {
			return -1
		}
		return 1
	case !a.first.Equal(b.first):
		return a.first.Compare(b.first)
	}
	return strings.Compare(a.name, b.name)
}

// routed records a request routed to w with the adapter at at, predicted
// to get its first token at first (at when unknown); a request id
// already running is left as it is.
func (a *adapters) routed(id string, w index.WorkerID, name string, at, first time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.byRequest[id]; dup {
		return
	}
	key := loraKey(name)
	a.byRequest[id] = routedAdapter{w: w, name: name, key: key}
	a.inFlight.Store(int64(len(a.byRequest)))
	a.workerLocked(w).addRunning(name, key, adapterRequest{id: id, at: at, first: first})
}

// freed forgets a request that ended; nothing when it ran without an
// adapter.
func (a *adapters) freed(id string) {
	if a.inFlight.Load() == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.byRequest[id]
	if !ok {
		return
	}
	delete(a.byRequest, id)
	a.inFlight.Store(int64(len(a.byRequest)))
	if st := a.workers[r.w]; st != nil {
		st.dropRunning(r.name, r.key, id)
	}
}

// removeInstance forgets what a gone instance had loaded and ran.
func (a *adapters) removeInstance(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for w := range a.workers {
		if w.Instance == id {
			delete(a.workers, w)
		}
	}
	for rid, r := range a.byRequest {
		if r.w.Instance == id {
			delete(a.byRequest, rid)
		}
	}
	a.inFlight.Store(int64(len(a.byRequest)))
}

// filterLocked keeps the candidates whose card lists the adapter, in their
// order; ErrNoWorker when none does. Under Core.mu.
func (a *adapters) filterLocked(out []candidate, model, name, target string) ([]candidate, error) {
	kept := out[:0]
	for _, cd := range out {
		if a.servesLocked(cd.in.InstanceId, model, name) {
			kept = append(kept, cd)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("%w of %s serves LoRA adapter %q", ErrNoWorker, target, name)
	}
	return kept, nil
}
