package ctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/ctl"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

func run(t *testing.T, ctx context.Context, s *stacktest.Stack, args ...string) (string, error) {
	t.Helper()
	args = append(args, "--registry-addr", s.RegistryAddr, "--router-addr", s.RouterAddr, "--eventbus-addr", s.EventbusAddr,
		"--frontend-addr", s.FrontendURL)
	var out, errOut bytes.Buffer
	err := ctl.Run(ctx, args, &out, &errOut)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), err
}

// chat sends one chat completion so that the mockers cache a prefix and
// publish its KV events.
func chat(t *testing.T, url, content string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":%q}]}`, stacktest.Model, content)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: status %d", resp.StatusCode)
	}
}

func TestCLIAgainstALiveStack(t *testing.T) {
	start := time.Now()
	s := stacktest.Start(t, stacktest.Options{})
	t.Logf("stack up in %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound, not a speed check: a loaded machine is slow
	defer cancel()
	long := strings.Repeat("Tell me about the rail yards of the old west and their switches. ", 20)
	chat(t, s.FrontendURL, long)
	t.Logf("first request served after %v", time.Since(start))

	// The router indexes the KV events of that request (asynchronously).
	deadline := time.Now().Add(20 * time.Second)
	for s.Router.Core().Stats().IndexedBlocks == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the router indexed no blocks after a request")
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Run("status", func(t *testing.T) {
		out, err := run(t, ctx, s, "status")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("switchyard status:\n%s", out)
		for _, want := range []string{"MODELS", stacktest.Model, "INSTANCES", "live", "ROUTERS", s.RouterAddr, "serving", "EVENT STREAMS", "dynamo"} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q", want)
			}
		}
		if strings.Contains(out, "problem:") {
			t.Errorf("status reports a problem with a healthy stack")
		}
	})
	t.Run("status json", func(t *testing.T) {
		out, err := run(t, ctx, s, "status", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var st ctl.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		if len(st.Instances) != 2 || len(st.Models) != 1 || st.Models[0].Instances != 2 || len(st.Routers) != 1 || len(st.Streams) != 1 {
			t.Fatalf("status = %+v", st)
		}
		var indexed uint64
		withEvents := 0
		for _, in := range st.Instances {
			if in.State != "live" || in.Transport != "tcp" || in.Address == "" {
				t.Errorf("instance %+v", in)
			}
			indexed += in.IndexedBlocks
			if in.LastEventAge != "" {
				withEvents++
			}
		}
		// The worker that served the request published KV events; the
		// router says how long ago the last one came.
		if withEvents == 0 {
			t.Errorf("no instance has a last KV event age: %+v", st.Instances)
		}
		if indexed == 0 || st.Streams[0].Messages == 0 || st.Routers[0].EventsApplied == 0 {
			t.Errorf("no cache state in %+v", st)
		}
	})
	t.Run("route explains the cached worker", func(t *testing.T) {
		msgs := filepath.Join(t.TempDir(), "messages.json")
		if err := os.WriteFile(msgs, []byte(fmt.Sprintf(`[{"role":"user","content":%q}]`, long)), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, ctx, s, "route", "--model", stacktest.Model, "--messages", msgs)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("switchyard route:\n%s", out)
		for _, want := range []string{"prompt tokens", "router mode kv", "CACHED BLOCKS", "<-", "pick ", "lowest cost"} {
			if !strings.Contains(out, want) {
				t.Errorf("route lacks %q", want)
			}
		}
		// The same prompt as the request: the worker that served it holds
		// every full block, and the explanation says so.
		jout, err := run(t, ctx, s, "route", "--model", stacktest.Model, "--messages", msgs, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var ex struct {
			RequestBlocks int    `json:"requestBlocks"`
			InstanceID    string `json:"instanceId"`
			Candidates    []struct {
				Candidate struct {
					InstanceID    string `json:"instanceId"`
					OverlapBlocks int    `json:"overlapBlocks"`
				} `json:"candidate"`
			} `json:"candidates"`
		}
		if err := json.Unmarshal([]byte(jout), &ex); err != nil {
			t.Fatalf("%v in %s", err, jout)
		}
		best := 0
		for _, c := range ex.Candidates {
			if c.Candidate.InstanceID == ex.InstanceID {
				best = c.Candidate.OverlapBlocks
			}
		}
		if ex.RequestBlocks == 0 || best != ex.RequestBlocks {
			t.Fatalf("picked %s with %d of %d blocks cached: %s", ex.InstanceID, best, ex.RequestBlocks, jout)
		}
		// Explaining recorded nothing.
		for _, w := range s.Router.Core().Stats().Workers {
			if w.Requests != 0 {
				t.Fatalf("explain left a request on worker %x", w.InstanceId)
			}
		}
	})
	t.Run("workers watch", func(t *testing.T) {
		out, err := run(t, ctx, s, "workers", "--watch", "--interval", "10ms", "--frames", "2")
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out, "every 10ms"); n != 2 {
			t.Fatalf("%d frames, want 2:\n%s", n, out)
		}
	})
	t.Run("events", func(t *testing.T) {
		out, err := run(t, ctx, s, "events", "--namespace", "dynamo", "--from-start", "--subject", "*.kv_cache_update", "--count", "1")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "dynamo.backend.kv_cache_update  kv instance=") || !strings.Contains(out, "stored ") {
			t.Fatalf("events:\n%s", out)
		}
		out, err = run(t, ctx, s, "events", "--namespace", "dynamo", "--from-start", "--subject", "*.load_metrics", "--count", "1", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var line struct {
			Subject string         `json:"subject"`
			Message map[string]any `json:"message"`
		}
		if err := json.Unmarshal([]byte(out), &line); err != nil || line.Message["kvBlocksTotal"] == nil {
			t.Fatalf("load event %q: %v", out, err)
		}
	})
}

func TestCLIUsage(t *testing.T) {
	tests := []struct {
		args    []string
		want    int
		wantErr string
	}{
		{args: nil, want: 2, wantErr: "Commands:"},
		{args: []string{"nope"}, want: 2, wantErr: `unknown command "nope"`},
		{args: []string{"status", "-o", "yaml"}, want: 2, wantErr: "valid values are table, json"},
		{args: []string{"route", "--model", "m"}, want: 1, wantErr: "one of --prompt or --messages"},
		{args: []string{"status", "-h"}, want: 0, wantErr: "[$SWITCHYARD_REGISTRY_ADDR]"},
		{args: []string{"status", "--registry-addr", "127.0.0.1:1", "--timeout", "200ms"}, want: 1, wantErr: "registry 127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := ctl.Main(tt.args, &out, &errOut); got != tt.want {
				t.Fatalf("exit %d, want %d; stderr %s", got, tt.want, errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.wantErr) {
				t.Fatalf("stderr %q lacks %q", errOut.String(), tt.wantErr)
			}
		})
	}
}

func TestRequestBody(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "list.json")
	whole := filepath.Join(dir, "whole.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(list, []byte(`[{"role":"user","content":"hi"}]`), 0o600)
	os.WriteFile(whole, []byte(`{"model":"other","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}}`), 0o600)
	os.WriteFile(bad, []byte(`{"prompt":"x"}`), 0o600)
	tests := []struct {
		name, prompt, file string
		want               string
		chat               bool
		wantErr            bool
	}{
		{name: "prompt", prompt: "hello", want: `{"model":"m","prompt":"hello"}`},
		{name: "message list", file: list, chat: true, want: `{"messages":[{"role":"user","content":"hi"}],"model":"m"}`},
		{name: "whole request keeps its fields, model replaced", file: whole, chat: true,
			want: `{"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}],"model":"m"}`},
		{name: "no messages", file: bad, wantErr: true},
		{name: "missing file", file: filepath.Join(dir, "none.json"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, chat, err := ctl.RequestBody("m", tt.prompt, tt.file)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error for %s", tt.file)
				}
				return
			}
			if err != nil || string(b) != tt.want || chat != tt.chat {
				t.Fatalf("got %s chat=%v err=%v; want %s chat=%v", b, chat, err, tt.want, tt.chat)
			}
		})
	}
}
