package frontend

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// catalog is the live view of the registry: model cards by model name and
// live instances, fed by the registry watches.
type catalog struct {
	mu        sync.RWMutex
	cards     map[string]*registryv1.ModelCard // by cardKey
	instances map[uint64]int                   // instance id -> live endpoints
	// transports are the live instances' request plane addresses (the
	// last registration's), for calls not routed by the router
	// (embeddings).
	transports map[uint64]*commonv1.Transport
}

func newCatalog() *catalog {
	return &catalog{cards: map[string]*registryv1.ModelCard{}, instances: map[uint64]int{}, transports: map[uint64]*commonv1.Transport{}}
}

func cardKey(c *registryv1.ModelCard) string {
	return fmt.Sprintf("%s/%s/%s/%x/%s", c.GetNamespace(), c.GetComponent(), c.GetEndpoint(), c.GetInstanceId(), c.GetModelName())
}

// onModels applies model card changes.
func (c *catalog) onModels(changes []registryclient.Change[*registryv1.ModelCard]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range changes {
		if ch.Deleted {
			delete(c.cards, cardKey(ch.Item))
		} else {
			c.cards[cardKey(ch.Item)] = ch.Item
		}
	}
}

// onInstances applies instance changes.
func (c *catalog) onInstances(changes []registryclient.Change[*registryv1.Instance]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range changes {
		id := ch.Item.GetInstanceId()
		if ch.Deleted {
			if c.instances[id]--; c.instances[id] <= 0 {
				delete(c.instances, id)
				delete(c.transports, id)
			}
		} else {
			c.instances[id]++
			c.transports[id] = ch.Item.GetTransport()
		}
	}
}

// card returns a card of model, preferring one whose instance is live, or
// nil when no card names the model. A model that no card names as its
// model but one lists as a LoRA adapter is that adapter: the card returned
// is then one of its base model that lists it (its ModelName differs from
// model).
func (c *catalog) card(model string) *registryv1.ModelCard {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var found, adapter *registryv1.ModelCard
	adapterLive := false
	for _, card := range c.cards {
		live := c.instances[card.GetInstanceId()] > 0
		if card.GetModelName() != model {
			if !adapterLive && listsAdapter(card, model) {
				adapter, adapterLive = card, live
			}
			continue
		}
		if live {
			return card
		}
		found = card
	}
	if found == nil {
		return adapter
	}
	return found
}

// listsAdapter says whether card lists a LoRA adapter named name.
func listsAdapter(card *registryv1.ModelCard, name string) bool {
	for _, l := range card.GetLoraAdapters() {
		if l.GetName() == name {
			return true
		}
	}
	return false
}

// modelInstances returns the live instances that serve model.
func (c *catalog) modelInstances(model string) []uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []uint64
	for _, card := range c.cards {
		if card.GetModelName() == model && c.instances[card.GetInstanceId()] > 0 {
			out = append(out, card.GetInstanceId())
		}
	}
	return out
}

// embedders returns the live instances whose card of model lists the
// embed task, with their request plane addresses, ordered by id.
func (c *catalog) embedders(model string) []embedTarget {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []embedTarget
	for _, card := range c.cards {
		id := card.GetInstanceId()
		if card.GetModelName() != model || c.instances[id] <= 0 || !slices.Contains(card.GetTasks(), registryv1.ModelTask_MODEL_TASK_EMBED) {
			continue
		}
		out = append(out, embedTarget{instanceID: id, transport: c.transports[id]})
	}
	slices.SortFunc(out, func(a, b embedTarget) int { return cmp.Compare(a.instanceID, b.instanceID) })
	return out
}

// listedModel is a model as /v1/models lists it: a LoRA adapter has its
// base model as parent, and its path as root when its card gives one.
type listedModel struct{ id, parent, root string }

// models returns the served models, then the LoRA adapters their cards
// list that no card serves as a model, sorted by name.
func (c *catalog) models() []listedModel {
	c.mu.RLock()
	defer c.mu.RUnlock()
	set := map[string]listedModel{}
	for _, card := range c.cards {
		set[card.GetModelName()] = listedModel{id: card.GetModelName()}
	}
	for _, card := range c.cards {
		for _, l := range card.GetLoraAdapters() {
			if m, ok := set[l.GetName()]; ok && (m.parent == "" || m.root != "") {
				continue // a model, or an adapter already listed with its path
			}
			set[l.GetName()] = listedModel{id: l.GetName(), parent: card.GetModelName(), root: l.GetPath()}
		}
	}
	out := make([]listedModel, 0, len(set))
	for _, m := range set {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// modelNames returns the names models lists.
func (c *catalog) modelNames() []string {
	ms := c.models()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.id
	}
	return out
}

// liveModelInstances counts live instances that serve at least one model.
func (c *catalog) liveModelInstances() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	seen := map[uint64]bool{}
	for _, card := range c.cards {
		if id := card.GetInstanceId(); c.instances[id] > 0 {
			seen[id] = true
		}
	}
	return len(seen)
}

// assets are a model's preprocessing assets with the service's chat prefix
// cache.
type assets struct {
	*preprocess.Assets
	// prompts is the chat prefix cache; nil disables it.
	prompts *promptCache
}

// inVocab refuses token ids the model's tokenizer does not have (an
// engine would fail on them, or read past its embeddings), naming param.
func (a *assets) inVocab(param string, ids []uint32) error {
	n := a.Tokenizer().VocabSize()
	for i, id := range ids {
		if int64(id) >= int64(n) {
			return invalid(param, "%s[%d] is token id %d, outside the model's vocabulary (ids 0 to %d)", param, i, id, n-1)
		}
	}
	return nil
}

// chatPrompt renders the chat template and tokenizes the result, through
// the chat prefix cache when there is one. The ids must not be modified.
func (a *assets) chatPrompt(ctx context.Context, r *chatRequest) ([]uint32, error) {
	if !a.HasTemplate() {
		return nil, invalid("messages", "the model has no chat template; use /v1/completions")
	}
	_, span := startSpan(ctx, "frontend.template")
	msgs, tools := r.messages(), r.tools.Template()
	text, err := a.Render(msgs, tools, r.ChatTemplateKwargs)
	if err != nil {
		err = invalid("messages", "the chat template cannot render these messages: %v", err)
		endSpan(span, err)
		return nil, err
	}
	span.End()
	_, span = startSpan(ctx, "frontend.tokenize")
	defer span.End()
	var ids []uint32
	if a.prompts == nil {
		ids = a.Encode(text)
	} else {
		ids = a.prompts.encode(a.Assets, a.prompts.keys(a.Assets, msgs, tools, r.ChatTemplateKwargs), text)
	}
	span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", len(ids)))
	return ids, nil
}

// textOut turns generated token ids into text deltas, holding back the tail
// that could still become a stop string so that a stop string never reaches
// the client.
type textOut struct {
	dec     *tokenizer.StreamDecoder
	stops   []string
	held    string
	maxStop int
	stopped bool
}

func newTextOut(tok *tokenizer.Tokenizer, stops []string) *textOut {
	t := &textOut{dec: tok.NewStreamDecoder(true), stops: stops}
	for _, s := range stops {
		t.maxStop = max(t.maxStop, len(s))
	}
	return t
}

// add decodes ids and returns the text that is safe to send, and whether a
// stop string ended the output (the text is then cut before it).
func (t *textOut) add(ids []uint32) (string, bool) {
	for _, id := range ids {
		t.held += t.dec.Add(id)
	}
	return t.release(false)
}

// flush returns the rest of the text at the end of generation.
func (t *textOut) flush() (string, bool) {
	t.held += t.dec.Flush()
	return t.release(true)
}

func (t *textOut) release(final bool) (string, bool) {
	if t.stopped {
		return "", true
	}
	if len(t.stops) == 0 {
		out := t.held
		t.held = ""
		return out, false
	}
	cut := -1
	for _, s := range t.stops {
		if i := strings.Index(t.held, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		out := t.held[:cut]
		t.held, t.stopped = "", true
		return out, true
	}
	keep := t.maxStop - 1
	if final || len(t.held) <= keep {
		if final {
			out := t.held
			t.held = ""
			return out, false
		}
		return "", false
	}
	// Release all but the last keep bytes, moved back to a rune start. With
	// keep 0 (every stop one byte long) n is len(held), which is a boundary.
	n := len(t.held) - keep
	for n > 0 && n < len(t.held) && !utf8RuneStart(t.held[n]) {
		n--
	}
	out := t.held[:n]
	t.held = t.held[n:]
	return out, false
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
