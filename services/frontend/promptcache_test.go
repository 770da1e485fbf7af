package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// qwenAssets returns the Qwen3 assets with a chat prefix cache of budget
// bytes (none when budget is 0).
func qwenAssets(t testing.TB, tok *tokenizer.Tokenizer, budget int64) *assets {
	t.Helper()
	raw, err := qwen3.ReadFile("tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tokenizer.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := preprocess.NewAssets(tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &assets{Assets: pa}
	if budget > 0 {
		a.prompts = newPromptCache(budget, prometheus.NewRegistry())
	}
	return a
}

// chatBody builds and decodes a chat request body.
func chatBody(t testing.TB, msgs []map[string]any, extra map[string]any) *chatRequest {
	t.Helper()
	return mustDecodeChat(t, chatJSON(t, msgs, extra))
}

func chatJSON(t testing.TB, msgs []map[string]any, extra ...map[string]any) []byte {
	t.Helper()
	body := map[string]any{"model": "m", "messages": msgs}
	for _, e := range extra {
		for k, v := range e {
			body[k] = v
		}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustDecodeChat(t testing.TB, raw []byte) *chatRequest {
	t.Helper()
	req, _, err := decodeChat(raw)
	if err != nil {
		t.Fatalf("decodeChat: %v\n%s", err, raw)
	}
	return req
}

// chatFragments make up random message contents: plain words, the
// template's own special tokens, think tags, tool markup, whitespace runs
// and non-ASCII text, so that cached prefixes end at awkward places.
var chatFragments = []string{
	"hello", " world", "The locomotive pulled its train.", "\n", "\n\n", "  ", "\t", "<|im_start|>", "<|im_end|>",
	"<|im_", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "{\"a\": 1}", "'s", "日本語",
	"é", "ﬁ", "12345", "!", "?", "<", "|", "assistant", "user", "\"quoted\"", "back\\slash", "\r\n",
}

func randomContent(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(12) {
		b.WriteString(chatFragments[r.IntN(len(chatFragments))])
	}
	return b.String()
}

func randomMessage(r *rand.Rand, role string) map[string]any {
	m := map[string]any{"role": role, "content": randomContent(r)}
	if role == "assistant" {
		switch r.IntN(5) {
		case 0:
			m["content"] = "<think>" + randomContent(r) + "</think>" + randomContent(r)
		case 1:
			m["reasoning_content"] = randomContent(r)
		case 2:
			m["tool_calls"] = []map[string]any{{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}}
		}
	}
	return m
}

var cacheTool = map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}

// TestChatPrefixCacheExact is the property test: across random
// conversations sent turn by turn, with edits of earlier turns,
// regenerated answers, tools and template arguments switched on and off,
// the cached path's ids equal a full render and encode, with a cache that
// never evicts and with one that evicts all the time.
func TestChatPrefixCacheExact(t *testing.T) {
	t.Parallel()
	tok := qwenTokenizer(t)
	plain := qwenAssets(t, tok, 0)
	for _, budget := range []int64{64 << 20, 24 << 10} {
		t.Run(fmt.Sprintf("budget %d", budget), func(t *testing.T) {
			a := qwenAssets(t, tok, budget)
			r := rand.New(rand.NewPCG(uint64(budget), 17))
			requests := 0
			for conv := range 40 {
				var msgs []map[string]any
				if r.IntN(2) == 0 {
					msgs = append(msgs, map[string]any{"role": "system", "content": randomContent(r)})
				}
				extra := map[string]any{}
				for turn := range 8 {
					msgs = append(msgs, randomMessage(r, "user"))
					switch r.IntN(8) {
					case 0: // the client edits an earlier message
						msgs[r.IntN(len(msgs))]["content"] = randomContent(r)
					case 1:
						extra["tools"] = []any{cacheTool}
					case 2:
						extra["chat_template_kwargs"] = map[string]any{"enable_thinking": r.IntN(2) == 0}
					case 3:
						delete(extra, "tools")
					}
					for range 1 + r.IntN(2) { // sometimes the same turn twice (a retry)
						req := chatBody(t, msgs, extra)
						got, err := a.chatPrompt(context.Background(), req)
						if err != nil {
							t.Fatal(err)
						}
						want, err := plain.chatPrompt(context.Background(), req)
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(got, want) {
							t.Fatalf("conversation %d turn %d: cached ids differ from a full encode\ncached %v\nfull   %v", conv, turn, got, want)
						}
						requests++
					}
					if r.IntN(4) == 0 && len(msgs) > 2 { // a tool round trip
						msgs = append(msgs, map[string]any{"role": "assistant", "content": "", "tool_calls": []map[string]any{{"id": "call_2",
							"type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Oslo"}`}}}},
							map[string]any{"role": "tool", "tool_call_id": "call_2", "content": randomContent(r)})
					}
					msgs = append(msgs, randomMessage(r, "assistant"))
				}
			}
			hits := testutil.ToFloat64(a.prompts.hits)
			misses := testutil.ToFloat64(a.prompts.misses)
			if hits+misses != float64(requests) {
				t.Fatalf("lookups %v+%v, want %d", hits, misses, requests)
			}
			// Not vacuous: most later turns reuse a prefix.
			if hits < float64(requests)/3 {
				t.Fatalf("only %v of %d requests hit", hits, requests)
			}
			if _, used := a.prompts.stats(); used > budget {
				t.Fatalf("cache holds %d bytes, budget %d", used, budget)
			}
			t.Logf("%d requests, %v hits, %v tokens reused, %v encoded, %v evictions", requests, hits,
				testutil.ToFloat64(a.prompts.reused), testutil.ToFloat64(a.prompts.encoded), testutil.ToFloat64(a.prompts.evicted))
		})
	}
}

// TestChatPrefixCacheMemory: a conversation sent turn by turn keeps one
// entry (each turn supersedes the last), a second conversation adds one,
// and the byte budget evicts the least recently used.
func TestChatPrefixCacheMemory(t *testing.T) {
	t.Parallel()
	tok := qwenTokenizer(t)
	a := qwenAssets(t, tok, 64<<20)
	conversation := func(name string, turns int) {
		msgs := []map[string]any{{"role": "system", "content": "You are " + name + "."}}
		for i := range turns {
			msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("question %d %s", i, strings.Repeat("words ", 50))})
			if _, err := a.chatPrompt(context.Background(), chatBody(t, msgs, nil)); err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("answer %d", i)})
		}
	}
	conversation("first", 5)
	if n, _ := a.prompts.stats(); n != 1 {
		t.Fatalf("one conversation of 5 turns holds %d entries, want 1", n)
	}
	if hits := testutil.ToFloat64(a.prompts.hits); hits != 4 {
		t.Fatalf("hits = %v, want 4 (every turn after the first)", hits)
	}
	conversation("second", 3)
	n, used := a.prompts.stats()
	if n != 2 {
		t.Fatalf("two conversations hold %d entries, want 2", n)
	}
	// A budget of one and a half conversations keeps only the newest.
	a.prompts.budget = used * 3 / 4
	conversation("third", 3)
	if n, used := a.prompts.stats(); n != 1 || used > a.prompts.budget {
		t.Fatalf("after eviction: %d entries, %d bytes (budget %d), want 1 entry", n, used, a.prompts.budget)
	}
	if ev := testutil.ToFloat64(a.prompts.evicted); ev != 2 {
		t.Fatalf("evictions = %v, want 2", ev)
	}
	// An entry larger than the whole budget is not cached.
	a.prompts.budget = 100
	if _, err := a.chatPrompt(context.Background(), chatBody(t, []map[string]any{{"role": "user", "content": "hi"}}, nil)); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.prompts.stats(); n != 1 {
		t.Fatalf("an entry over the budget was cached: %d entries", n)
	}
}

// TestCommonPrefix checks the blockwise comparison at every length.
func TestCommonPrefix(t *testing.T) {
	a := strings.Repeat("abcdefgh", 1200)
	for _, i := range []int{0, 1, 7, 8, 63, 64, 511, 512, 4095, 4096, 4097, 9000, len(a) - 1} {
		b := a[:i] + "X" + a[i+1:]
		if got := commonPrefix(a, b); got != i {
			t.Fatalf("commonPrefix differing at %d = %d", i, got)
		}
	}
	if got := commonPrefix(a, a[:5000]); got != 5000 {
		t.Fatalf("commonPrefix of a prefix = %d", got)
	}
}
