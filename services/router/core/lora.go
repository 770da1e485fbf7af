package core

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
// request with the adapter), which each worker reported loaded, and which
// requests routed to each worker run with one. A worker counts as having
// an adapter loaded while its last load report lists it or a request
// routed there with it runs: the engine loads the adapter to serve the
// request and keeps it loaded while the request runs, so a burst of
// requests for one adapter is priced as one load, before any report says
// so.
type adapters struct {
	// serves is, per instance, per model name, the adapters its card
	// lists; under Core.mu.
	serves map[uint64]map[string][]string

	mu sync.Mutex
	// loaded is each worker's last reported adapters.
	loaded map[index.WorkerID][]string
	// running counts, per worker, per adapter, the routed requests that
	// run with it; byRequest names each one's worker and adapter.
	running   map[index.WorkerID]map[string]int
	byRequest map[string]routedAdapter
	// inFlight is len(byRequest), read without mu so that freeing a
	// request without an adapter costs no lock.
	inFlight atomic.Int64
}

// routedAdapter is a running request's worker and adapter.
type routedAdapter struct {
	w    index.WorkerID
	name string
}

func newAdapters() *adapters {
	return &adapters{
		serves:    map[uint64]map[string][]string{},
		loaded:    map[index.WorkerID][]string{},
		running:   map[index.WorkerID]map[string]int{},
		byRequest: map[string]routedAdapter{},
	}
}

// cardLocked records (or, deleted, forgets) the adapters a model card
// lists; under Core.mu.
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
		return
	}
	names := make([]string, 0, len(card.GetLoraAdapters()))
	for _, l := range card.GetLoraAdapters() {
		names = append(names, l.GetName())
	}
	if models == nil {
		models = map[string][]string{}
		a.serves[id] = models
	}
	models[card.GetModelName()] = names
}

// servesLocked says whether an instance's card for model (any of its
// cards when model is empty: an endpoint target) lists the adapter; under
// Core.mu.
func (a *adapters) servesLocked(id uint64, model, name string) bool {
	if model != "" {
		return slices.Contains(a.serves[id][model], name)
	}
	for _, names := range a.serves[id] {
		if slices.Contains(names, name) {
			return true
		}
	}
	return false
}

// report keeps a worker's reported adapters.
func (a *adapters) report(w index.WorkerID, names []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(names) == 0 {
		delete(a.loaded, w)
		return
	}
	a.loaded[w] = append(a.loaded[w][:0], names...)
}

// has says whether w has the adapter loaded, or is about to.
func (a *adapters) has(w index.WorkerID, name string) bool {
	return a.running[w][name] > 0 || slices.Contains(a.loaded[w], name)
}

// routed records a request routed to w with the adapter; a request id
// already running is left as it is.
func (a *adapters) routed(id string, w index.WorkerID, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.byRequest[id]; dup {
		return
	}
	a.byRequest[id] = routedAdapter{w: w, name: name}
	a.inFlight.Store(int64(len(a.byRequest)))
	m := a.running[w]
	if m == nil {
		m = map[string]int{}
		a.running[w] = m
	}
	m[name]++
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
	m := a.running[r.w]
	if m[r.name]--; m[r.name] <= 0 {
		delete(m, r.name)
		if len(m) == 0 {
			delete(a.running, r.w)
		}
	}
}

// removeInstance forgets what a gone instance had loaded and ran.
func (a *adapters) removeInstance(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for w := range a.loaded {
		if w.Instance == id {
			delete(a.loaded, w)
		}
	}
	for rid, r := range a.byRequest {
		if r.w.Instance == id {
			delete(a.byRequest, rid)
		}
	}
	for w := range a.running {
		if w.Instance == id {
			delete(a.running, w)
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
