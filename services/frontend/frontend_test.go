package frontend_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/services/frontend"
)

// TestMain builds the Qwen3 tokenizer once for every test's frontends.
func TestMain(m *testing.M) {
	if err := frontend.ShareQwenTokenizer(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The fault tests wait out outages, restarts and fences; at go test's
	// default (as many at once as cores) they would run two by two.
	testwait.AtLeastParallel(4)
	testleak.VerifyTestMain(m)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRequestPlanes runs the OpenAI client against the whole stack on each
// request plane: the models list, and chat and completions, streamed and
// not.
func TestRequestPlanes(t *testing.T) {
	t.Parallel()
	for _, plane := range []transport.Plane{transport.PlaneTCP, transport.PlaneHTTP, transport.PlaneNATS} {
		t.Run(string(plane), func(t *testing.T) {
			ctx := testCtx(t)
			s := startStack(t, stackOpts{plane: plane})
			if h := s.health(); h.code != 503 || h.Instances != 0 {
				t.Fatalf("health without workers = %d %+v, want 503 and no instances", h.code, h)
			}
			s.addMocker(0)
			s.waitInstances(1)

			t.Run("models", func(t *testing.T) {
				page, err := s.client.Models.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Data) != 1 || page.Data[0].ID != testModel || page.Data[0].Object != "model" {
					t.Fatalf("models = %+v", page.Data)
				}
			})
			t.Run("chat", func(t *testing.T) {
				resp, err := s.client.Chat.Completions.New(ctx, chatParams("Hello there, how are you?", 8))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Choices[0].FinishReason != "length" {
					t.Fatalf("chat = %+v", resp)
				}
				if resp.Usage.CompletionTokens != 8 || resp.Usage.PromptTokens == 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+8 {
					t.Fatalf("usage = %+v", resp.Usage)
				}
			})
			t.Run("chat stream", func(t *testing.T) {
				text, finish, usage, err := streamChat(ctx, s.client, chatParams("Tell me a story.", 12))
				if err != nil {
					t.Fatal(err)
				}
				if text == "" || finish != "length" || usage.CompletionTokens != 12 {
					t.Fatalf("stream: text %q finish %q usage %+v", text, finish, usage)
				}
			})
			t.Run("completion", func(t *testing.T) {
				resp, err := s.client.Completions.New(ctx, openai.CompletionNewParams{Model: testModel,
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(6)})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 6 {
					t.Fatalf("completion = %+v", resp)
				}
			})
			t.Run("completion echo logprobs", func(t *testing.T) {
				// As an evaluation harness scores a continuation: the
				// prompt back with every token's log probability.
				const prompt = "Once upon a time"
				resp, err := s.client.Completions.New(ctx, openai.CompletionNewParams{Model: testModel,
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)}, MaxTokens: openai.Int(1),
					Echo: openai.Bool(true), Logprobs: openai.Int(1), Temperature: openai.Float(0)})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Choices) != 1 || !strings.HasPrefix(resp.Choices[0].Text, prompt) {
					t.Fatalf("echo: %+v", resp)
				}
				lp := resp.Choices[0].Logprobs
				n := int(resp.Usage.PromptTokens + resp.Usage.CompletionTokens)
				// openai-go's top_logprobs type has no room for the first
				// entry's null (the API's, and vLLM's, answer): it leaves
				// the field empty and keeps the raw JSON, read here.
				var top []map[string]float64
				if err := json.Unmarshal([]byte(lp.JSON.TopLogprobs.Raw()), &top); err != nil {
					t.Fatal(err)
				}
				if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(top) != n || top[0] != nil || len(top[1]) != 1 ||
					strings.Join(lp.Tokens, "") != resp.Choices[0].Text {
					t.Fatalf("echo logprobs for %d tokens: %+v", n, lp)
				}
			})
			t.Run("embeddings", func(t *testing.T) {
				resp, err := s.client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: testModel,
					Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"The quick brown fox", "jumps over"}}})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Data) != 2 || len(resp.Data[0].Embedding) != 1024 || resp.Usage.PromptTokens == 0 || resp.Data[1].Index != 1 {
					t.Fatalf("embeddings: %d vectors, usage %+v", len(resp.Data), resp.Usage)
				}
			})
			t.Run("completion stream", func(t *testing.T) {
				st := s.client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: testModel,
					Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
					MaxTokens:     openai.Int(7),
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
				defer st.Close()
				var text strings.Builder
				var finish string
				var usage int64
				for st.Next() {
					c := st.Current()
					for _, ch := range c.Choices {
						text.WriteString(ch.Text)
						if ch.FinishReason != "" {
							finish = string(ch.FinishReason)
						}
					}
					usage += c.Usage.CompletionTokens
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				if text.Len() == 0 || finish != "length" || usage != 7 {
					t.Fatalf("completion stream: text %q finish %q completion tokens %d", text.String(), finish, usage)
				}
			})
		})
	}
}

// TestRouterModes checks where requests go: in kv and approximate mode the
// second turn of a chat goes to the worker that served the first (its cache
// holds the prefix); round-robin alternates.
func TestRouterModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		opts       stackOpts
		sameWorker bool
	}{
		{"kv", stackOpts{mode: "kv", bridgeKV: true}, true},
		{"approximate", stackOpts{mode: "kv", noKVEvents: true}, true},
		{"round-robin", stackOpts{mode: "round-robin"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := startStack(t, tt.opts)
			s.addMocker(0)
			s.addMocker(0)
			s.waitInstances(2)

			system := strings.Repeat("You are a careful assistant who answers in full sentences. ", 8)
			msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage("What is the capital of France?")}
			first, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, MaxTokens: openai.Int(8)})
			if err != nil {
				t.Fatal(err)
			}
			if tt.opts.bridgeKV {
				deadline := time.Now().Add(10 * time.Second)
				for s.router.Core().Stats().GetIndexedBlocks() == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the router never indexed the first turn's blocks")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			msgs = append(msgs, openai.AssistantMessage(first.Choices[0].Message.Content), openai.UserMessage("And of Italy?"))
			if _, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, Messages: msgs, MaxTokens: openai.Int(8)}); err != nil {
				t.Fatal(err)
			}
			counts := s.metrics("switchyard_frontend_worker_requests_total")
			var got []float64
			for _, v := range counts {
				got = append(got, v)
			}
			if tt.sameWorker && (len(got) != 1 || got[0] != 2) {
				t.Fatalf("per-worker requests = %v, want both turns on one worker", counts)
			}
			if !tt.sameWorker && (len(got) != 2 || got[0] != 1 || got[1] != 1) {
				t.Fatalf("per-worker requests = %v, want one on each worker", counts)
			}
		})
	}
}

// TestMigration kills the worker serving a stream: with a migration limit
// the stream completes on the other worker; with limit 0 it ends with an
// error event.
func TestMigration(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{3, 0} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			ctx := testCtx(t)
			s := startStack(t, stackOpts{mode: "round-robin", migrationLimit: limit})
			// Slow enough (a decode step of about 0.3 s, 60 tokens in about
			// 17 s) that the stream is still running when the second worker
			// is up and the first dies, even on a loaded CI machine; the
			// second worker has no delay, so the migrated rest is quick.
			a := s.addMocker(0.02)
			s.waitInstances(1)

			p := chatParams("Write a long essay about trains.", 60)
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			st := s.client.Chat.Completions.NewStreaming(ctx, p)
			defer st.Close()
			var text strings.Builder
			var finish string
			var usage openai.CompletionUsage
			chunks := 0
			for st.Next() {
				ch := st.Current()
				for _, c := range ch.Choices {
					text.WriteString(c.Delta.Content)
					if c.FinishReason != "" {
						finish = c.FinishReason
					}
				}
				if ch.Usage.TotalTokens > 0 {
					usage = ch.Usage
				}
				if chunks++; chunks == 3 {
					if limit > 0 {
						s.addMocker(0)
						s.waitInstances(2)
					}
					a.kill()
				}
			}
			if limit == 0 {
				if st.Err() == nil || !strings.Contains(st.Err().Error(), "worker_failed") {
					t.Fatalf("stream error = %v, want a worker_failed error event", st.Err())
				}
				return
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if finish != "length" || usage.CompletionTokens != 60 {
				t.Fatalf("migrated stream: finish %q usage %+v", finish, usage)
			}
			if n := s.metric("switchyard_frontend_migrations_total", ""); n != 1 {
				t.Fatalf("migrations = %v, want 1", n)
			}
		})
	}
}

// TestErrors checks OpenAI-shaped errors and their statuses.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startStack(t, stackOpts{mode: "round-robin", contextLength: 64})
	s.addMocker(0)
	s.waitInstances(1)

	_, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no/such-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if statusOf(err) != 404 {
		t.Fatalf("unknown model: %v, want 404", err)
	}
	long := strings.Repeat("word ", 200)
	tests := []struct {
		name, path, body string
		status           int
		param            string
	}{
		{"bad JSON", "/v1/chat/completions", `{"model": "x", "messages": [`, 400, ""},
		{"not an object", "/v1/completions", `[1,2]`, 400, ""},
		{"missing messages", "/v1/chat/completions", `{"model":"` + testModel + `"}`, 400, "messages"},
		{"wrong type", "/v1/chat/completions", `{"model":"` + testModel + `","messages":"hi"}`, 400, "messages"},
		{"max_tokens zero", "/v1/completions", `{"model":"` + testModel + `","prompt":"hi","max_tokens":0}`, 400, "max_tokens"},
		{"temperature", "/v1/completions", `{"model":"` + testModel + `","prompt":"hi","temperature":3}`, 400, "temperature"},
		{"over context", "/v1/completions", `{"model":"` + testModel + `","prompt":"` + long + `"}`, 400, "prompt"},
		{"max_tokens over context", "/v1/completions", `{"model":"` + testModel + `","prompt":"hi","max_tokens":100}`, 400, "max_tokens"},
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"hi"}`, 404, "model"},
		{"unknown path", "/v1/nothing", `{}`, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.post(tt.path, tt.body, nil)
			if code != tt.status {
				t.Fatalf("status %d, want %d (%v)", code, tt.status, body)
			}
			e := errorObject(t, body)
			if tt.param != "" && e["param"] != tt.param {
				t.Fatalf("param %v, want %s", e["param"], tt.param)
			}
		})
	}
}

// TestAuthAndSaturation checks API keys (401) and the per-worker in-flight
// limit (429), and that a client going away frees its worker.
func TestAuthAndSaturation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startStack(t, stackOpts{mode: "round-robin", apiKey: "sekrit", maxInflight: 1})
	s.addMocker(1)
	s.waitInstances(1)

	code, body := s.post("/v1/completions", `{"model":"`+testModel+`","prompt":"hi"}`, map[string]string{"Authorization": "Bearer wrong"})
	if code != 401 {
		t.Fatalf("wrong key: %d, want 401", code)
	}
	errorObject(t, body)

	sctx, cancel := context.WithCancel(ctx)
	p := chatParams("Count to a million.", 4000)
	st := s.client.Chat.Completions.NewStreaming(sctx, p)
	if !st.Next() {
		t.Fatalf("no first chunk: %v", st.Err())
	}
	_, err := s.client.Chat.Completions.New(ctx, chatParams("hi", 4))
	if statusOf(err) != 429 {
		t.Fatalf("second request on a saturated worker: %v, want 429", err)
	}
	// The client goes away: the frontend cancels the worker's generation
	// and frees its slot, long before 4000 tokens could be generated.
	cancel()
	st.Close()
	deadline := time.Now().Add(20 * time.Second)
	for s.metric("switchyard_frontend_inflight_requests", "") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned request is still in flight")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.client.Chat.Completions.New(ctx, chatParams("hi", 4)); err != nil {
		t.Fatalf("after the client left: %v", err)
	}
}

// TestConcurrentStreams runs many streams at once over two workers.
func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	n := 200
	if testing.Short() {
		n = 50
	}
	s := startStack(t, stackOpts{mode: "kv"})
	s.addMocker(0)
	s.addMocker(0)
	s.waitInstances(2)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			p := chatParams(fmt.Sprintf("Request number %d: say something.", i), 16)
			p.Temperature = param.NewOpt(0.0)
			_, finish, usage, err := streamChat(ctx, s.client, p)
			if err == nil && (finish != "length" || usage.CompletionTokens != 16) {
				err = fmt.Errorf("stream %d: finish %q usage %+v", i, finish, usage)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRouterFallback stops the router service: kv-mode requests still
// succeed, routed in process, and each is counted as a fallback.
func TestRouterFallback(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startStack(t, stackOpts{mode: "kv"})
	s.addMocker(0)
	s.waitInstances(1)
	if _, err := s.client.Chat.Completions.New(ctx, chatParams("hi", 4)); err != nil {
		t.Fatal(err)
	}
	if n := s.metric("switchyard_frontend_router_fallback_total", ""); n != 0 {
		t.Fatalf("fallbacks with the router up = %v", n)
	}
	s.stopRouter()
	for i := range 3 {
		if _, err := s.client.Chat.Completions.New(ctx, chatParams(fmt.Sprintf("hello %d", i), 4)); err != nil {
			t.Fatalf("with the router down: %v", err)
		}
	}
	if n := s.metric("switchyard_frontend_router_fallback_total", ""); n != 3 {
		t.Fatalf("fallbacks = %v, want 3", n)
	}
}
