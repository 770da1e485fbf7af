package frontend_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// pdStack is a stack whose router pairs every request of the model
// (--disaggregation always, unless stackOpts.configureRouter says
// otherwise) over prefill and decode mockers that serve /metrics.
type pdStack struct {
	*stack
	speedup float64
	// args are more mocker flags of every worker.
	args []string

	mu      sync.Mutex
	prefill []*mockerHandle
	decode  []*mockerHandle
}

// startPD starts a pdStack with the given workers.
func startPD(t *testing.T, prefill, decode int, speedup float64, o stackOpts, args ...string) *pdStack {
	t.Helper()
	if o.migrationLimit == 0 {
		o.migrationLimit = 3
	}
	if o.configureRouter == nil {
		o.configureRouter = func(c *router.Config) { c.Core.Disaggregation = core.DisaggAlways }
	}
	s := &pdStack{stack: startStack(t, o), speedup: speedup, args: args}
	for range prefill {
		s.add("prefill")
	}
	for range decode {
		s.add("decode")
	}
	s.waitInstances(prefill + decode)
	return s
}

// add starts a worker of role mode.
func (s *pdStack) add(mode string) *mockerHandle {
	s.t.Helper()
	m := s.startMocker([]transport.Plane{s.opts.plane}, s.speedup, true, append([]string{"--disaggregation-mode", mode}, s.args...)...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if mode == "prefill" {
		s.prefill = append(s.prefill, m)
	} else {
		s.decode = append(s.decode, m)
	}
	return m
}

// kill stops the worker of instance id and forgets it; it returns its
// role, "" when no live worker has the id.
func (s *pdStack) kill(id uint64) string {
	s.mu.Lock()
	var m *mockerHandle
	role := ""
	for _, pool := range []struct {
		name string
		ms   *[]*mockerHandle
	}{{"prefill", &s.prefill}, {"decode", &s.decode}} {
		for i, h := range *pool.ms {
			if h.w.InstanceID() == id {
				m, role = h, pool.name
				*pool.ms = append((*pool.ms)[:i:i], (*pool.ms)[i+1:]...)
				break
			}
		}
	}
	s.mu.Unlock()
	if m != nil {
		m.kill()
	}
	return role
}

// live is the live workers of both pools.
func (s *pdStack) live() (prefill, decode []*mockerHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*mockerHandle(nil), s.prefill...), append([]*mockerHandle(nil), s.decode...)
}

// heldBlocks sums the KV blocks the live prefill workers hold for
// handoffs (a stopped worker holds none).
func (s *pdStack) heldBlocks() float64 {
	s.t.Helper()
	prefill, _ := s.live()
	var n float64
	for _, m := range prefill {
		for _, v := range s.metricsAt(m.metricsURL, "switchyard_mocker_kv_handoff_held_blocks") {
			n += v
		}
	}
	return n
}

// waitReleased waits until no prefill worker holds a handoff's blocks, up
// to bound; it reports how long that took and whether it happened.
func (s *pdStack) waitReleased(bound time.Duration) (time.Duration, bool) {
	start := time.Now()
	for {
		if s.heldBlocks() == 0 {
			return time.Since(start), true
		}
		if time.Since(start) > bound {
			return time.Since(start), false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// chatResult is what a raw chat request got.
type chatResult struct {
	header                     http.Header
	text                       string
	prompt, completion, cached int
	chunks                     int
}

// chat sends a chat completion over plain HTTP with X-Request-Id rid (so
// that hooks know it) and reads it whole; streamed, onChunk (if set) is
// called after each content chunk. An error event or status is an error.
func (s *stack) chat(ctx context.Context, rid, content string, maxTokens int, stream bool, onChunk func(*chatResult)) (*chatResult, error) {
	body, _ := json.Marshal(map[string]any{"model": testModel, "messages": []map[string]string{{"role": "user", "content": content}},
		"max_tokens": maxTokens, "stream": stream, "stream_options": map[string]bool{"include_usage": true},
		"chat_template_kwargs": map[string]bool{"enable_thinking": false}})
	if !stream {
		body, _ = json.Marshal(map[string]any{"model": testModel, "messages": []map[string]string{{"role": "user", "content": content}},
			"max_tokens": maxTokens, "chat_template_kwargs": map[string]bool{"enable_thinking": false}})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if rid != "" {
		req.Header.Set("X-Request-Id", rid)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := &chatResult{header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return r, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	type usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	setUsage := func(u *usage) {
		if u == nil {
			return
		}
		r.prompt, r.completion = u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			r.cached = u.PromptTokensDetails.CachedTokens
		}
	}
	if !stream {
		var out struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return r, err
		}
		if len(out.Choices) > 0 {
			r.text = out.Choices[0].Message.Content
		}
		setUsage(out.Usage)
		return r, nil
	}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *usage           `json:"usage"`
			Error *json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			return r, err
		}
		if ch.Error != nil {
			return r, fmt.Errorf("error event: %s", *ch.Error)
		}
		setUsage(ch.Usage)
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			r.text += ch.Choices[0].Delta.Content
			r.chunks++
			if onChunk != nil {
				onChunk(r)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	if !done {
		return r, errors.New("the stream ended without [DONE]")
	}
	return r, nil
}

func hexID(id uint64) string { return strconv.FormatUint(id, 16) }

// TestDisaggregatedLegs: a stack of one prefill and one decode mocker
// answers chats, streamed and not, in two legs: every response names the
// decode worker and the prefill worker in its headers, the frontend sent
// one leg to each, the decode worker pulled every handoff and no KV stays
// held; usage is the whole request's, and the repeated prompt is counted
// as cached. With the prefill worker gone, a request runs whole on the
// decode worker and only it is named.
func TestDisaggregatedLegs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var logs syncBuffer
	s := startPD(t, 1, 1, 0, stackOpts{log: slog.New(slog.NewTextHandler(&logs, nil))})
	prefill, decode := s.prefill[0], s.decode[0]
	const requests, maxTokens = 4, 8
	for i := range requests {
		stream := i%2 == 1
		r, err := s.chat(ctx, "", "Explain why disaggregated prefill helps long prompts.", maxTokens, stream, nil)
		if err != nil {
			t.Fatalf("request %d (stream %v): %v", i, stream, err)
		}
		if got, want := r.header.Get(frontend.HeaderWorker), hexID(decode.w.InstanceID()); got != want {
			t.Errorf("request %d: %s = %q, want the decode worker %q", i, frontend.HeaderWorker, got, want)
		}
		if got, want := r.header.Get(frontend.HeaderPrefillWorker), hexID(prefill.w.InstanceID()); got != want {
			t.Errorf("request %d: %s = %q, want the prefill worker %q", i, frontend.HeaderPrefillWorker, got, want)
		}
		if r.completion != maxTokens || r.prompt == 0 || r.text == "" {
			t.Errorf("request %d: usage %d prompt, %d completion, text %q; want %d completion tokens", i, r.prompt, r.completion, r.text, maxTokens)
		}
		if i > 0 && r.cached == 0 {
			t.Errorf("request %d: no cached tokens for a prompt sent before", i)
		}
	}
	for _, w := range []struct {
		role string
		m    *mockerHandle
	}{{"prefill", prefill}, {"decode", decode}} {
		if n := s.metric("switchyard_frontend_worker_requests_total", fmt.Sprintf(`instance="%s"`, hexID(w.m.w.InstanceID()))); n != requests {
			t.Errorf("the %s worker got %v legs, want %d", w.role, n, requests)
		}
	}
	if n := s.metric("switchyard_frontend_disagg_requests_total", ""); n != requests {
		t.Errorf("two-leg attempts %v, want %d", n, requests)
	}
	if n := s.metric("switchyard_frontend_disagg_fallbacks_total", ""); n != 0 {
		t.Errorf("fallbacks %v, want none", n)
	}
	pulled := s.metricsAt(prefill.metricsURL, "switchyard_mocker_kv_handoffs_ended_total")[`{end="pulled"}`]
	if pulled != requests {
		t.Errorf("handoffs pulled %v, want %d", pulled, requests)
	}
	if took, ok := s.waitReleased(10 * time.Second); !ok {
		t.Errorf("KV still held %v after the requests", took)
	}
	s.waitIdle("after the two-leg requests")
	// The access log names both workers of each two-leg request.
	named := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, " worker="+hexID(decode.w.InstanceID())) && strings.Contains(line, " prefill_worker="+hexID(prefill.w.InstanceID())) {
			named++
		}
	}
	if named != requests {
		t.Errorf("%d access log lines name both workers, want %d", named, requests)
	}
	// Without a prefill worker the decode worker runs requests whole: the
	// response names it alone.
	s.kill(prefill.w.InstanceID())
	s.waitInstances(1)
	r, err := s.chat(ctx, "", "And without a prefill worker?", maxTokens, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w, p := r.header.Get(frontend.HeaderWorker), r.header.Get(frontend.HeaderPrefillWorker); w != hexID(decode.w.InstanceID()) || p != "" || r.completion != maxTokens {
		t.Errorf("a whole request: worker %q, prefill worker %q, %d tokens; want the decode worker alone, %d tokens", w, p, r.completion, maxTokens)
	}
}

// TestDisaggAutoConcurrentLongPrompts: with --disaggregation auto, long
// prompts sent together while both decode workers have requests decoding
// are prefilled on the prefill workers, at least in part (a local prefill
// would stall the decodes there, and queue behind the other prompts);
// every one is answered whole, by a decode worker, named in its headers.
func TestDisaggAutoConcurrentLongPrompts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startPD(t, 2, 2, 20, stackOpts{configureRouter: func(c *router.Config) { c.Core.Disaggregation = core.DisaggAuto }})
	decoders := map[string]bool{}
	for _, m := range s.decode {
		decoders[hexID(m.w.InstanceID())] = true
	}
	// Two long answers to short prompts, one per decode worker at best:
	// the long prompts then find requests decoding. They are cancelled once
	// the long prompts are answered: only their decoding meanwhile matters.
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	var bg, wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for i := range 2 {
		bg.Add(1)
		go func() {
			defer bg.Done()
			once := false
			if _, err := s.chat(bctx, "", fmt.Sprintf("Tell a long story, part %d.", i), 3000, true, func(*chatResult) {
				if !once {
					once = true
					started <- struct{}{}
				}
			}); err != nil && bctx.Err() == nil {
				t.Errorf("background request %d: %v", i, err)
			}
		}()
	}
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the background requests never started decoding")
		}
	}
	const prompts = 6
	results := make([]*chatResult, prompts)
	errs := make([]error, prompts)
	for i := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// About 3,000 tokens, none shared with another prompt.
			var b strings.Builder
			for w := range 450 {
				fmt.Fprintf(&b, "w%dx%d ", i, w)
			}
			results[i], errs[i] = s.chat(ctx, "", b.String(), 4, false, nil)
		}()
	}
	wg.Wait()
	bcancel()
	bg.Wait()
	remote := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("long prompt %d: %v", i, errs[i])
		}
		if !decoders[r.header.Get(frontend.HeaderWorker)] || r.completion != 4 || r.prompt < 2500 {
			t.Errorf("long prompt %d: worker %q, %d prompt and %d completion tokens; want a decode worker, >= 2500 and 4", i,
				r.header.Get(frontend.HeaderWorker), r.prompt, r.completion)
		}
		if r.header.Get(frontend.HeaderPrefillWorker) != "" {
			remote++
		}
	}
	t.Logf("%d of %d long prompts prefilled remotely", remote, prompts)
	if remote == 0 {
		t.Errorf("no long prompt prefilled on a prefill worker while decodes ran on both decode workers")
	}
	if n := s.metric("switchyard_frontend_disagg_requests_total", ""); int(n) < remote {
		t.Errorf("two-leg attempts %v, below the %d remote answers", n, remote)
	}
}
