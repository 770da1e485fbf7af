package frontend

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"weak"

	"go.opentelemetry.io/otel/attribute"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
)

// assetLoadTimeout bounds fetching and parsing one model's tokenizer files.
const assetLoadTimeout = time.Minute

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

// assets are what preprocessing needs of one model: its tokenizer and its
// chat template.
type assets struct {
	// id tells the assets apart in the chat prefix cache's keys.
	id uint64
	// prompts is the chat prefix cache; nil disables it.
	prompts *promptCache
	tok     *tokenizer.Tokenizer
	cfg     *tokenizer.Config
	tmpl    *chattemplate.Template // nil when the model has none
	bosID   uint32
	hasBOS  bool
}

// inVocab refuses token ids the model's tokenizer does not have (an
// engine would fail on them, or read past its embeddings), naming param.
func (a *assets) inVocab(param string, ids []uint32) error {
	n := a.tok.VocabSize()
	for i, id := range ids {
		if int64(id) >= int64(n) {
			return invalid(param, "%s[%d] is token id %d, outside the model's vocabulary (ids 0 to %d)", param, i, id, n-1)
		}
	}
	return nil
}

// assetCache loads model assets from the eventbus object store once per
// content (the sha256 of the tokenizer files), for every model that shares
// them. A failed load is not cached, so the next request retries it.
type assetCache struct {
	bus *eventbusclient.Client
	// prompts is the chat prefix cache of the loaded assets (nil: none).
	prompts *promptCache
	mu      sync.Mutex
	entries map[string]*assetEntry
	loaded  uint64
}

type assetEntry struct {
	done chan struct{}
	a    *assets
	err  error
}

func newAssetCache(bus *eventbusclient.Client) *assetCache {
	return &assetCache{bus: bus, entries: map[string]*assetEntry{}}
}

// tokenizerFiles finds the tokenizer.json (or .gz) and tokenizer_config.json
// artifacts of a card.
func tokenizerFiles(card *registryv1.ModelCard) (tok, cfg *registryv1.TokenizerArtifact) {
	for _, a := range card.GetTokenizer() {
		switch a.GetName() {
		case "tokenizer.json", "tokenizer.json.gz":
			tok = a
		case "tokenizer_config.json":
			cfg = a
		}
	}
	return tok, cfg
}

// get returns the assets of card, loading them on first use. ctx bounds only
// this caller's wait; the load itself runs under load.
func (c *assetCache) get(ctx, load context.Context, card *registryv1.ModelCard) (*assets, error) {
	tokArt, cfgArt := tokenizerFiles(card)
	if tokArt == nil {
		return nil, fmt.Errorf("%w: model %s has no tokenizer.json artifact", ErrModelAssets, card.GetModelName())
	}
	key := tokArt.GetSha256() + "+" + cfgArt.GetSha256()
	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok {
		e = &assetEntry{done: make(chan struct{})}
		c.entries[key] = e
		c.loaded++
	}
	id := c.loaded
	c.mu.Unlock()
	if !ok {
		lctx, cancel := context.WithTimeout(load, assetLoadTimeout)
		e.a, e.err = c.load(lctx, tokArt, cfgArt)
		cancel()
		if e.err == nil {
			e.a.id, e.a.prompts = id, c.prompts
		}
		if e.err != nil {
			c.mu.Lock()
			delete(c.entries, key)
			c.mu.Unlock()
		}
		close(e.done)
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.a, e.err
}

func (c *assetCache) fetch(ctx context.Context, a *registryv1.TokenizerArtifact) ([]byte, error) {
	bucket, name, ok := strings.Cut(a.GetObjectKey(), "/")
	if !ok || name == "" {
		return nil, fmt.Errorf("%w: artifact %s has object key %q, want bucket/name", ErrModelAssets, a.GetName(), a.GetObjectKey())
	}
	var buf bytes.Buffer
	info, err := c.bus.GetObject(ctx, bucket, name, &buf)
	if err != nil {
		return nil, fmt.Errorf("%w: fetch %s: %v", ErrModelAssets, a.GetObjectKey(), err)
	}
	if a.GetSha256() != "" && info.GetSha256() != "" && !strings.EqualFold(a.GetSha256(), info.GetSha256()) {
		return nil, fmt.Errorf("%w: %s has sha256 %s, the model card says %s", ErrModelAssets, a.GetObjectKey(), info.GetSha256(), a.GetSha256())
	}
	return buf.Bytes(), nil
}

func (c *assetCache) load(ctx context.Context, tokArt, cfgArt *registryv1.TokenizerArtifact) (*assets, error) {
	raw, err := c.fetch(ctx, tokArt)
	if err != nil {
		return nil, err
	}
	tok, err := parsedTokenizers.load(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrModelAssets, err)
	}
	a := &assets{tok: tok, cfg: &tokenizer.Config{}}
	if cfgArt != nil {
		raw, err := c.fetch(ctx, cfgArt)
		if err != nil {
			return nil, err
		}
		if a.cfg, err = tokenizer.ParseConfig(raw); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrModelAssets, err)
		}
	}
	if a.cfg.ChatTemplate != "" {
		if a.tmpl, err = chattemplate.Parse(a.cfg.ChatTemplate); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrModelAssets, err)
		}
	}
	if a.cfg.AddBOSToken && a.cfg.BOSToken != "" {
		a.bosID, a.hasBOS = tok.TokenID(a.cfg.BOSToken)
	}
	return a, nil
}

// tokenizerSet holds the tokenizers a process has built, by the sha256 of
// their tokenizer.json bytes, for as long as some assets use them.
type tokenizerSet struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]weak.Pointer[tokenizer.Tokenizer]
}

// parsedTokenizers lets every frontend of a process (the in-process stack,
// a test's stacks) build one tokenizer once: building one takes 0.3 s of CPU
// and 120 MB of garbage (2.5 s under the race detector), and a Tokenizer
// is immutable and safe for concurrent use. The files are still fetched
// and checked per frontend; only identical bytes share.
var parsedTokenizers = newTokenizerSet()

func newTokenizerSet() *tokenizerSet {
	return &tokenizerSet{m: map[[sha256.Size]byte]weak.Pointer[tokenizer.Tokenizer]{}}
}

// load returns the tokenizer of a tokenizer.json (plain or gzipped), built
// now unless one built from the same bytes is still in use. Two first
// loads at once may both build; the first to finish is kept.
func (ts *tokenizerSet) load(raw []byte) (*tokenizer.Tokenizer, error) {
	key := sha256.Sum256(raw)
	ts.mu.Lock()
	tok := ts.m[key].Value()
	ts.mu.Unlock()
	if tok != nil {
		return tok, nil
	}
	tok, err := tokenizer.LoadReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if kept := ts.m[key].Value(); kept != nil {
		return kept, nil
	}
	wp := weak.Make(tok)
	ts.m[key] = wp
	runtime.AddCleanup(tok, func(key [sha256.Size]byte) {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if ts.m[key] == wp {
			delete(ts.m, key)
		}
	}, key)
	return tok, nil
}

// chatPrompt renders the chat template and tokenizes the result, through
// the chat prefix cache when there is one. The ids must not be modified.
func (a *assets) chatPrompt(ctx context.Context, r *chatRequest) ([]uint32, error) {
	if a.tmpl == nil {
		return nil, invalid("messages", "the model has no chat template; use /v1/completions")
	}
	_, span := startSpan(ctx, "frontend.template")
	msgs, tools := r.messages(), r.tools.templateTools()
	text, err := a.tmpl.Render(chattemplate.Input{Messages: msgs, AddGenerationPrompt: true, Tools: tools,
		BOSToken: a.cfg.BOSToken, EOSToken: a.cfg.EOSToken, Extra: r.ChatTemplateKwargs})
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
		ids = a.encode(text)
	} else {
		ids = a.prompts.encode(a, a.prompts.keys(a, msgs, tools, r.ChatTemplateKwargs), text)
	}
	span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", len(ids)))
	return ids, nil
}

// encode tokenizes text, adding the BOS token when the model wants it and
// the text does not already start with it.
func (a *assets) encode(text string) []uint32 {
	var ids []uint32
	if a.hasBOS && !strings.HasPrefix(text, a.cfg.BOSToken) {
		ids = append(ids, a.bosID)
	}
	return a.tok.AppendEncode(ids, text)
}

// encodeMarks is encode that also returns the tokenizer's marks, for the
// chat prefix cache.
func (a *assets) encodeMarks(text string) ([]uint32, []tokenizer.Mark) {
	var ids []uint32
	if a.hasBOS && !strings.HasPrefix(text, a.cfg.BOSToken) {
		ids = append(ids, a.bosID)
	}
	return a.tok.AppendEncodeMarks(ids, nil, text)
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
