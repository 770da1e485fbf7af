package pyworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestPythonWorkerInAMixedFleet runs a mixed fleet: one model served
// by three Go mockers, one on each request plane (tcp, http, nats), and by
// the Python worker (http, with the tokenizer it uploaded), behind one
// frontend whose own plane is tcp. The frontend dials every instance on
// the plane it registered, so all 50 concurrent chats are answered, and
// round-robin gives the Python worker its quarter.
func TestPythonWorkerInAMixedFleet(t *testing.T) {
	t.Parallel()
	requirePython(t)
	// The bound is generous: the frontend builds the Qwen tokenizer, which
	// under the race detector on a loaded machine takes most of a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, reg := registrytest.Start(t)
	nats, bus := eventbustest.Start(t)
	planeConfig := func(p transport.Plane) transport.Config {
		c := transport.DefaultConfig()
		c.Plane, c.TCP.Host, c.HTTP.Host, c.HTTP.Port, c.NATS.URL = p, "127.0.0.1", "127.0.0.1", 0, nats.ClientURL()
		return c
	}
	for _, p := range []transport.Plane{transport.PlaneTCP, transport.PlaneHTTP, transport.PlaneNATS} {
		var cfg mocker.Config
		fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		if err := fs.Parse([]string{"--namespace", namespace, "--component", component, "--registry-addr", reg.Addr,
			"--eventbus-addr", bus.Addr().String(), "--context-length", "4096", "--speedup-ratio", "0"}); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Complete(); err != nil {
			t.Fatal(err)
		}
		cfg.Transport = planeConfig(p)
		cfg.DrainTimeout = 5 * time.Second
		mctx, mcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mocker.Run(mctx, cfg, slog.New(slog.DiscardHandler), nil) }()
		t.Cleanup(func() {
			mcancel()
			if err := <-done; err != nil {
				t.Errorf("mocker on %s: %v", p, err)
			}
		})
	}
	dir := t.TempDir()
	if _, err := qwen3.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	// The mockers' model, block size and context length; later flags win.
	w := startWorker(t, reg.Addr, bus.Addr().String(), "--model-name", qwen3.ModelName, "--tokenizer-dir", dir,
		"--block-size", "16", "--context-length", "4096")
	w.logs.waitFor(ctx, t, "worker registered", nil)

	var cfg frontend.Config
	cfg.RegisterFlags(flag.NewFlagSet("frontend", flag.ContinueOnError))
	cfg.HTTPAddr, cfg.RouterMode, cfg.Namespace = "127.0.0.1:0", "round-robin", namespace
	cfg.RegistryAddr, cfg.EventbusAddr = reg.Addr, bus.Addr().String()
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Transport = planeConfig(transport.PlaneTCP)
	fctx, fcancel := context.WithCancel(context.Background())
	fe, err := frontend.Start(fctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fcancel()
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer func() {
		fcancel()
		if err := fe.Wait(); err != nil {
			t.Errorf("frontend: %v", err)
		}
		tr.CloseIdleConnections()
	}()
	hc := &http.Client{Transport: tr}
	url := "http://" + fe.Addr().String()

	for {
		var h struct {
			Instances int `json:"instances"`
		}
		resp, err := hc.Get(url + "/health")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		if err == nil && h.Instances == 4 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the frontend sees %d instances; want 4 (%v)", h.Instances, err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	// The Python worker's echo engine repeats the templated prompt, so its
	// answers begin with the user turn's role and the start of the marker
	// word; the mockers' canned text never does.
	const chats, marker = 50, "Zanzibar"
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failed   []string
		byPython int
	)
	for i := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(map[string]any{"model": qwen3.ModelName, "max_tokens": 6,
				"messages":             []map[string]string{{"role": "user", "content": fmt.Sprintf("%s number %d", marker, i)}},
				"chat_template_kwargs": map[string]any{"enable_thinking": false}})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			var out struct {
				Choices []struct {
					Message struct{ Content string } `json:"message"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			resp, err := hc.Do(req)
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if err == nil && (resp.StatusCode != http.StatusOK || len(out.Choices) != 1 || out.Usage.CompletionTokens != 6) {
					err = fmt.Errorf("status %d, answer %+v", resp.StatusCode, out)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("chat %d: %v", i, err))
				return
			}
			if strings.HasPrefix(out.Choices[0].Message.Content, "user\n"+marker[:3]) {
				byPython++
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d chats failed:\n%s", len(failed), chats, strings.Join(failed, "\n"))
	}
	if lo, hi := chats/4, (chats+3)/4; byPython < lo || byPython > hi {
		t.Errorf("the Python worker answered %d of %d chats; round-robin over 4 instances gives it %d-%d", byPython, chats, lo, hi)
	}
	if code := w.stop(t); code != 0 {
		t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
	}
}
