package frontend_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/services/frontend"
)

// syncBuffer is a log sink safe for the frontend's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// manualClock is a time source that moves only when told to.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestPerKeyRateLimits runs the frontend with a key file over HTTP: a key
// over its requests per minute and a key over its tokens per minute get 429
// rate_limit_exceeded with Retry-After, an unlimited key never does, and
// /metrics counts each key's requests, tokens and refusals by the key's name
// while neither /metrics nor the log ever holds a key.
func TestPerKeyRateLimits(t *testing.T) {
	t.Parallel()
	const alpha, beta, gamma = "sk-alpha-0123456789abcdef", "sk-beta-0123456789abcdef", "sk-gamma-0123456789abcdef"
	keyFile := filepath.Join(t.TempDir(), "keys")
	// beta is stored hashed; its tokens per minute are fewer than one
	// request's prompt plus 64 completion tokens.
	file := alpha + " name=alpha rpm=2\n" + authtoken.Hash(beta) + " name=beta tpm=50\n" + gamma + " rpm=0\n"
	if err := os.WriteFile(keyFile, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	// The buckets run on a clock that moves only when the test says: what
	// the limits admit does not depend on how long a request takes on a
	// loaded machine.
	clock := &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := startStack(t, stackOpts{log: slog.New(slog.NewJSONHandler(logs, nil)), configure: func(c *frontend.Config) {
		c.APIKeyFile = keyFile
		c.KeyTokensPerMinute = 0
		c.RateLimitClock = clock.Now
	}})
	s.addMocker(0)
	s.waitInstances(1)

	chat := func(key string, maxTokens int) *http.Response {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": testModel, "max_tokens": maxTokens,
			"messages":             []map[string]string{{"role": "user", "content": "Hello there, how are you?"}},
			"chat_template_kwargs": map[string]any{"enable_thinking": false}})
		req, err := http.NewRequest(http.MethodPost, s.url+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	// refused checks a 429 rate_limit_exceeded with a Retry-After of whole
	// seconds at least minSeconds, and returns its message.
	refused := func(resp *http.Response, minSeconds int) string {
		t.Helper()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d (%s), want 429", resp.StatusCode, b)
		}
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || ra < minSeconds {
			t.Fatalf("Retry-After %q, want whole seconds >= %d", resp.Header.Get("Retry-After"), minSeconds)
		}
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "rate_limit_error" {
			t.Fatalf("body %s, want an OpenAI rate_limit_exceeded error", b)
		}
		return e.Error.Message
	}
	ok := func(resp *http.Response) {
		t.Helper()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d (%s), want 200", resp.StatusCode, b)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}

	t.Run("requests per minute", func(t *testing.T) {
		ok(chat(alpha, 4))
		ok(chat(alpha, 4))
		// Two per minute: the third waits 30 s for a token.
		if msg := refused(chat(alpha, 4), 30); !strings.Contains(msg, "2 requests per minute") {
			t.Fatalf("message %q does not name the limit", msg)
		}
		// 29 s later it is still early; at 30 s one more is admitted.
		clock.Advance(29 * time.Second)
		refused(chat(alpha, 4), 1)
		clock.Advance(time.Second)
		ok(chat(alpha, 4))
	})
	t.Run("tokens per minute", func(t *testing.T) {
		// A full bucket admits the prompt; the 64 completion tokens then
		// overdraw it, so the next request waits for more than a second.
		ok(chat(beta, 64))
		if msg := refused(chat(beta, 4), 2); !strings.Contains(msg, "50 tokens per minute") {
			t.Fatalf("message %q does not name the limit", msg)
		}
	})
	t.Run("unlimited key", func(t *testing.T) {
		for range 5 {
			ok(chat(gamma, 4))
		}
	})
	t.Run("unknown key", func(t *testing.T) {
		if resp := chat("sk-nobody", 4); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unknown key: status %d, want 401", resp.StatusCode)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		for _, c := range []struct {
			name, labels string
			want         float64
		}{
			{"switchyard_frontend_api_key_requests_total", `{key_name="alpha"}`, 5},
			{"switchyard_frontend_api_key_requests_total", `{key_name="beta"}`, 2},
			{"switchyard_frontend_api_key_requests_total", `{key_name="key-3"}`, 5},
			{"switchyard_frontend_rate_limited_total", `{key_name="alpha",limit="requests"}`, 2},
			{"switchyard_frontend_rate_limited_total", `{key_name="beta",limit="tokens"}`, 1},
			{"switchyard_frontend_api_key_tokens_total", `{key_name="beta",kind="completion"}`, 64},
			{"switchyard_frontend_api_key_tokens_total", `{key_name="key-3",kind="completion"}`, 20},
			{"switchyard_frontend_api_key_limit_per_minute", `{key_name="alpha",limit="requests"}`, 2},
			{"switchyard_frontend_api_key_limit_per_minute", `{key_name="beta",limit="tokens"}`, 50},
			{"switchyard_frontend_api_key_limit_per_minute", `{key_name="key-3",limit="requests"}`, 0},
		} {
			if got := s.metrics(c.name)[c.labels]; got != c.want {
				t.Errorf("%s%s = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
		if got := s.metrics("switchyard_frontend_api_key_available")[`{key_name="beta",limit="tokens"}`]; got >= 0 {
			t.Errorf("beta's token bucket holds %v after the overdraft, want below 0", got)
		}
		resp, err := s.http.Get(s.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		all, _ := io.ReadAll(resp.Body)
		for _, k := range []string{alpha, beta, gamma, authtoken.Hash(beta)} {
			if bytes.Contains(all, []byte(k)) {
				t.Fatalf("/metrics holds a key (%.12s...)", k)
			}
		}
	})
	t.Run("log", func(t *testing.T) {
		l := logs.String()
		for _, k := range []string{alpha, beta, gamma, authtoken.Hash(beta)} {
			if strings.Contains(l, k) {
				t.Fatalf("the log holds a key (%.12s...)", k)
			}
		}
		if !strings.Contains(l, `"api_key":"alpha"`) {
			t.Fatalf("the access log does not name the key alpha: %s", l)
		}
	})
}
