package frontend_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// turnResult is one conversation turn as the client saw it.
type turnResult struct {
	status int
	worker string
	reply  string
	cached int
}

// converse sends one chat turn with messages and header, streamed or not,
// with extra body fields; onFirst (streamed only) runs at the first
// content chunk.
func (s *stack) converse(ctx context.Context, msgs []map[string]string, header map[string]string, extra map[string]any, maxTokens int,
	stream bool, onFirst func()) (turnResult, error) {
	body := map[string]any{"model": testModel, "messages": msgs, "max_tokens": maxTokens, "stream": stream,
		"chat_template_kwargs": map[string]bool{"enable_thinking": false}}
	if stream {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	for k, v := range extra {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return turnResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return turnResult{}, err
	}
	defer resp.Body.Close()
	r := turnResult{status: resp.StatusCode, worker: resp.Header.Get(frontend.HeaderWorker)}
	type usage struct {
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return r, fmt.Errorf("status %d: %s", resp.StatusCode, msg)
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
			r.reply = out.Choices[0].Message.Content
		}
		if out.Usage != nil && out.Usage.PromptTokensDetails != nil {
			r.cached = out.Usage.PromptTokensDetails.CachedTokens
		}
		return r, nil
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			return r, nil
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			return r, err
		}
		if ch.Error != nil {
			return r, fmt.Errorf("error event: %s", *ch.Error)
		}
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			if r.reply == "" && onFirst != nil {
				onFirst()
			}
			r.reply += ch.Choices[0].Delta.Content
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	return r, fmt.Errorf("the stream ended without [DONE]")
}

// conversation is an agent's chat: its session header and messages so far.
type conversation struct {
	header map[string]string
	msgs   []map[string]string
	// workers are the turns' X-Switchyard-Worker, in order.
	workers []string
}

// turn adds a user message, sends the conversation and keeps the reply.
func (c *conversation) turn(ctx context.Context, s *stack, n, maxTokens int, stream bool, onFirst func()) error {
	c.msgs = append(c.msgs, map[string]string{"role": "user", "content": fmt.Sprintf("step %d: read the file, then say what the next step is, in detail", n)})
	r, err := s.converse(ctx, c.msgs, c.header, nil, maxTokens, stream, onFirst)
	if err != nil {
		return err
	}
	c.msgs = append(c.msgs, map[string]string{"role": "assistant", "content": r.reply})
	c.workers = append(c.workers, r.worker)
	return nil
}

// TestSessionsLive runs two agents' conversations through the frontend, the
// router service and three mockers: one names its session in x-session-id,
// the other in Dynamo's X-Dynamo-Session-ID. Every turn of a conversation
// goes to the worker of its first turn, and every response names it in
// X-Switchyard-Worker. Then the first agent's worker dies in the middle of
// a streamed turn: the turn completes on another worker (migrated), the
// binding moves there, and the next turns follow it; no turn is lost. A
// bad session id is a 400.
func TestSessionsLive(t *testing.T) {
	s := startStack(t, stackOpts{bridgeKV: true, migrationLimit: 2})
	byWorker := map[string]*mockerHandle{}
	for range 3 {
		// Slow enough (real time) that a long answer is still streaming
		// when its worker is killed.
		m := s.addMocker(1)
		byWorker[strconv.FormatUint(m.w.InstanceID(), 16)] = m
	}
	s.waitInstances(3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	agents := []*conversation{
		{header: map[string]string{"x-session-id": "agent-a"}},
		{header: map[string]string{"X-Dynamo-Session-ID": "agent-b"}},
	}
	ids := []string{"agent-a", "agent-b"}
	for n := 1; n <= 3; n++ {
		for i, a := range agents {
			if err := a.turn(ctx, s, n, 4, n%2 == 0, nil); err != nil {
				t.Fatalf("%s turn %d: %v", ids[i], n, err)
			}
		}
	}
	for i, a := range agents {
		first := a.workers[0]
		if byWorker[first] == nil {
			t.Fatalf("%s: X-Switchyard-Worker %q names no worker of the stack", ids[i], first)
		}
		for n, w := range a.workers {
			if w != first {
				t.Errorf("%s turn %d went to %s, its first to %s", ids[i], n+1, w, first)
			}
		}
		if w, ok := s.router.Core().SessionWorker(ids[i]); !ok || strconv.FormatUint(w.Instance, 16) != first {
			t.Errorf("%s: the router binds it to %v (%v), its turns went to %s", ids[i], w, ok, first)
		}
	}
	if st := s.router.Core().Sessions(); st.Outcomes[core.SessionHit] != 4 || st.Outcomes[core.SessionNew] != 2 {
		t.Errorf("router session outcomes = %v, want 2 new and 4 hits", st.Outcomes)
	}

	// The first agent's worker dies at the first token of a long answer.
	a := agents[0]
	dead := a.workers[0]
	if err := a.turn(ctx, s, 4, 256, true, func() { byWorker[dead].kill() }); err != nil {
		t.Fatalf("agent-a's turn across its worker's death: %v", err)
	}
	if n := s.metric("switchyard_frontend_migrations_total", ""); n != 1 {
		t.Errorf("%v migrations, want the one of the turn whose worker died", n)
	}
	moved, ok := s.router.Core().SessionWorker("agent-a")
	movedTo := strconv.FormatUint(moved.Instance, 16)
	if !ok || movedTo == dead || byWorker[movedTo] == nil {
		t.Fatalf("after its worker died agent-a is bound to %q (%v); dead %s", movedTo, ok, dead)
	}
	lost := 0
	for n := 5; n <= 6; n++ {
		for i, c := range agents {
			if err := c.turn(ctx, s, n, 4, false, nil); err != nil {
				t.Errorf("%s turn %d: %v", ids[i], n, err)
				lost++
			}
		}
	}
	if got := a.workers[len(a.workers)-2:]; got[0] != movedTo || got[1] != movedTo {
		t.Errorf("agent-a's turns after the move went to %v, bound to %s", got, movedTo)
	}
	b := agents[1]
	if b.workers[0] != dead {
		// Its worker lives: it stayed.
		for n, w := range b.workers {
			if w != b.workers[0] {
				t.Errorf("agent-b turn %d went to %s, its worker %s lives", n+1, w, b.workers[0])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d turns lost", lost)
	}
	t.Logf("agent-a: %v; agent-b: %v; router: %+v", a.workers, b.workers, s.router.Core().Sessions())

	for _, h := range []map[string]string{
		{"x-session-id": "has space"},
		{"x-session-id": strings.Repeat("s", core.MaxSessionIDLen+1)},
		{"x-session-id": "a", "X-Dynamo-Session-ID": "b"},
	} {
		r, err := s.converse(ctx, []map[string]string{{"role": "user", "content": "hi"}}, h, nil, 4, false, nil)
		if r.status != http.StatusBadRequest || err == nil || !strings.Contains(err.Error(), "session") {
			t.Errorf("headers %v: status %d, %v; want a 400 about the session", h, r.status, err)
		}
	}
}

// TestCacheSaltLive sends one prompt as two tenants with different cache
// salts, and without one, to a single mocker (so that every request meets
// every cached block): no tenant reuses a block another cached, each
// reuses its own, and every response names the worker.
func TestCacheSaltLive(t *testing.T) {
	s := startStack(t, stackOpts{bridgeKV: true})
	m := s.addMocker(0)
	s.waitInstances(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs := []map[string]string{{"role": "user", "content": strings.Repeat("the same long shared instructions for every tenant ", 20)}}
	for i, tc := range []struct {
		salt   string
		cached bool
	}{
		{"tenant-a", false},
		{"tenant-b", false}, // the same prompt, cached under tenant-a only
		{"", false},         // nor unsalted
		{"tenant-a", true},
		{"tenant-b", true},
		{"", true},
	} {
		var extra map[string]any
		if tc.salt != "" {
			extra = map[string]any{"cache_salt": tc.salt}
		}
		r, err := s.converse(ctx, msgs, nil, extra, 2, false, nil)
		if err != nil {
			t.Fatalf("request %d (salt %q): %v", i, tc.salt, err)
		}
		if (r.cached > 0) != tc.cached {
			t.Errorf("request %d (salt %q): %d prompt tokens cached, want cached = %v", i, tc.salt, r.cached, tc.cached)
		}
		if r.worker != strconv.FormatUint(m.w.InstanceID(), 16) {
			t.Errorf("request %d: X-Switchyard-Worker %q, want %x", i, r.worker, m.w.InstanceID())
		}
	}
	for _, salt := range []any{"", strings.Repeat("s", core.MaxCacheSaltLen+1), 7} {
		r, err := s.converse(ctx, msgs, nil, map[string]any{"cache_salt": salt}, 2, false, nil)
		if r.status != http.StatusBadRequest || err == nil || !strings.Contains(err.Error(), "cache_salt") {
			t.Errorf("cache_salt %.20v: status %d, %v; want a 400 naming cache_salt", salt, r.status, err)
		}
	}
}
