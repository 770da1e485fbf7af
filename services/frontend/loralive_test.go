package frontend_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestLoRALive runs LoRA adapters end to end on a real stack (registry,
// eventbus, kv router service, frontend) with three mockers: the first
// serves adapters chat, math and sql in two slots, the second sql in one,
// the third none. /v1/models lists each adapter with the model as its
// parent; every request for an adapter is served by a mocker that serves
// it (20 per adapter, checked by X-Switchyard-Worker); an adapter nobody
// serves is a 404; and one prompt cached under one adapter is not reused
// under another or by the base model, while the same adapter reuses it.
func TestLoRALive(t *testing.T) {
	s := startStack(t, stackOpts{bridgeKV: true})
	planes := []transport.Plane{s.opts.plane}
	m1 := s.startMocker(planes, 0, false, "--loras", "chat,math,sql", "--max-loras", "2")
	m2 := s.startMocker(planes, 0, false, "--loras", "sql", "--max-loras", "1")
	m3 := s.addMocker(0)
	s.waitInstances(3)
	name := func(m *mockerHandle) string { return strconv.FormatUint(m.w.InstanceID(), 16) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type listed struct {
		ID, Object, Parent string
	}
	var models struct{ Data []listed }
	resp, err := s.http.Get(s.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]listed{}
	for _, m := range models.Data {
		got[m.ID] = m
	}
	for _, id := range []string{"chat", "math", "sql"} {
		if m := got[id]; m.Object != "model" || m.Parent != testModel {
			t.Errorf("/v1/models lists %q as %+v, want a model with parent %q", id, m, testModel)
		}
	}
	if m := got[testModel]; m.ID == "" || m.Parent != "" {
		t.Errorf("/v1/models lists the base model as %+v", m)
	}

	able := map[string]map[string]bool{
		"chat":    {name(m1): true},
		"math":    {name(m1): true},
		"sql":     {name(m1): true, name(m2): true},
		testModel: {name(m1): true, name(m2): true, name(m3): true},
	}
	for _, model := range []string{"chat", "math", "sql", testModel} {
		served := map[string]int{}
		for i := range 20 {
			msgs := []map[string]string{{"role": "user", "content": "question " + strconv.Itoa(i) + " for " + model}}
			r, err := s.converse(ctx, msgs, nil, map[string]any{"model": model}, 2, i%2 == 1, nil)
			if err != nil {
				t.Fatalf("%s request %d: %v", model, i, err)
			}
			served[r.worker]++
		}
		for w, n := range served {
			if !able[model][w] {
				t.Errorf("%d requests for %s went to worker %s, which does not serve it (served: %v)", n, model, w, served)
			}
		}
	}
	if r, err := s.converse(ctx, []map[string]string{{"role": "user", "content": "hi"}}, nil, map[string]any{"model": "nope"}, 2, false, nil); r.status != http.StatusNotFound {
		t.Errorf("an adapter nobody serves: status %d (%v), want 404", r.status, err)
	}

	msgs := []map[string]string{{"role": "user", "content": strings.Repeat("one long prompt sent under every adapter ", 20)}}
	for i, tc := range []struct {
		model  string
		cached bool
	}{
		{"chat", false},
		{"math", false},    // the same prompt, cached under chat only (both on worker 1)
		{testModel, false}, // nor for the base model, wherever it runs
		{"chat", true},
		{"math", true},
	} {
		r, err := s.converse(ctx, msgs, nil, map[string]any{"model": tc.model}, 2, false, nil)
		if err != nil {
			t.Fatalf("cache request %d (%s): %v", i, tc.model, err)
		}
		if (r.cached > 0) != tc.cached {
			t.Errorf("cache request %d (%s): %d prompt tokens cached, want cached = %v", i, tc.model, r.cached, tc.cached)
		}
	}
}
