package pyworker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestPythonWorkerBehindFrontend: the Python worker uploads the Qwen3 test
// tokenizer to the object store and references it from its model card, so
// a real frontend (in process, round-robin: no router service needed)
// tokenizes an OpenAI chat for it and answers through it over the HTTP
// request plane.
func TestPythonWorkerBehindFrontend(t *testing.T) {
	t.Parallel()
	requirePython(t)
	// The bound is generous: the frontend builds the Qwen tokenizer, which
	// under the race detector on a loaded machine takes most of a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	dir := t.TempDir()
	if _, err := qwen3.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, reg.Addr, bus.Addr().String(), "--model-name", qwen3.ModelName, "--tokenizer-dir", dir)
	w.logs.waitFor(ctx, t, "worker registered", nil)
	// The card references each file by its object key, sha256 and size, as
	// pkg/worker's cards do.
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
	if err != nil || len(cards.Cards) != 1 {
		t.Fatalf("ListModels = %v, %v; want one card", cards, err)
	}
	var want []*registryv1.TokenizerArtifact
	for _, name := range qwen3.Files {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want = append(want, &registryv1.TokenizerArtifact{Name: name, Sha256: hex.EncodeToString(sum[:]), Size: int64(len(b)),
			ObjectKey: wire.TokenizerBucket + "/" + wire.TokenizerObject(qwen3.ModelName, name)})
	}
	if diff := cmp.Diff(want, cards.Cards[0].Tokenizer, protocmp.Transform()); diff != "" {
		t.Errorf("model card tokenizer (-want +got):\n%s", diff)
	}

	var cfg frontend.Config
	cfg.RegisterFlags(flag.NewFlagSet("frontend", flag.ContinueOnError))
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.RouterMode = "round-robin"
	cfg.RegistryAddr, cfg.EventbusAddr = reg.Addr, bus.Addr().String()
	cfg.Namespace = namespace
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Transport = transport.DefaultConfig()
	cfg.Transport.Plane = transport.PlaneHTTP
	fctx, fcancel := context.WithCancel(context.Background())
	fe, err := frontend.Start(fctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fcancel()
		t.Fatal(err)
	}
	defer func() {
		fcancel()
		if err := fe.Wait(); err != nil {
			t.Errorf("frontend: %v", err)
		}
	}()
	url := "http://" + fe.Addr().String()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	body, _ := json.Marshal(map[string]any{"model": qwen3.ModelName, "max_tokens": 6,
		"messages":             []map[string]string{{"role": "user", "content": "Hello from Go to Python"}},
		"chat_template_kwargs": map[string]any{"enable_thinking": false}})
	// The frontend learns of the model (and fetches its tokenizer) through
	// its registry watch; until then it answers 404 for the model.
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				Message      struct{ Content string } `json:"message"`
				FinishReason string                   `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusServiceUnavailable {
			select {
			case <-ctx.Done():
				t.Fatalf("the frontend never served %s (last status %d); the worker logged:\n%s", qwen3.ModelName, resp.StatusCode, w.logs.String())
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("chat: status %d, %v", resp.StatusCode, err)
		}
		// The echo engine repeats the templated prompt's tokens, so the text
		// that comes back holds the user's words.
		if len(out.Choices) != 1 || out.Choices[0].FinishReason != "length" || !strings.Contains(out.Choices[0].Message.Content, "Hello from") ||
			out.Usage.CompletionTokens != 6 || out.Usage.PromptTokens == 0 {
			t.Fatalf("chat answer = %+v; want one choice of 6 tokens of text, finish_reason length", out)
		}
		t.Logf("the Python worker answered %q (%d prompt tokens)", out.Choices[0].Message.Content, out.Usage.PromptTokens)
		break
	}
	// What the echo engine cannot honour is refused with its reason, not
	// answered as free text.
	for _, tc := range []struct{ path, body, reason string }{
		{"/v1/chat/completions", `{"model":"` + qwen3.ModelName + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`, "guided decoding"},
		{"/v1/chat/completions", `{"model":"` + qwen3.ModelName + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"logprobs":true}`, "log probabilities"},
		{"/v1/completions", `{"model":"` + qwen3.ModelName + `","max_tokens":1,"prompt":"hi there","echo":true,"logprobs":1}`, "log probabilities"},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), tc.reason) {
			t.Fatalf("%s %s: status %d %s; want 400 naming %q", tc.path, tc.body, resp.StatusCode, msg, tc.reason)
		}
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}
