package partition_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
)

// The serving half of the stack on a cluster: routers and a frontend, each
// in a namespace of its own, and what the tests ask them.

// startRouter starts a router on the cluster's registry and eventbus
// (gRPC on :7003, metrics on :9103). It snapshots nothing, so that a
// router started later replays the whole stream.
func (c *cluster) startRouter(t *testing.T, ctx context.Context, name string) *host {
	t.Helper()
	h := c.l.host(name)
	c.l.start(h, name, filepath.Join(c.bin, "router"), "--grpc-addr", h.addr+":7003", "--metrics-addr", h.addr+":9103",
		"--registry-addr", strings.Join(c.registryAddrs(), ","), "--eventbus-addr", c.bus.addr+":7002", "--snapshot-interval", "0")
	if err := waitServing(ctx, h.addr+":7003"); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return h
}

// startFrontend starts a frontend (HTTP on :8000) routing through the
// router at routerAddr.
func (c *cluster) startFrontend(t *testing.T, ctx context.Context, routerAddr string) *host {
	t.Helper()
	h := c.l.host("frontend")
	c.l.start(h, "frontend", "/usr/bin/env", "DYN_REQUEST_PLANE=tcp", filepath.Join(c.bin, "frontend"),
		"--http-addr", h.addr+":8000", "--registry-addr", strings.Join(c.registryAddrs(), ","),
		"--router-addr", routerAddr, "--eventbus-addr", c.bus.addr+":7002")
	// Ready once a chat is answered: the frontend has the model card and
	// a worker for it.
	var err error
	for i := 0; i < 300; i++ {
		if _, err = chat(ctx, h, "hello", false); err == nil {
			return h
		}
		select {
		case <-ctx.Done():
			t.Fatalf("frontend never answered a chat: %v (%v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("frontend never answered a chat: %v", err)
	return nil
}

// prompt is the i-th prompt of a load in which prompts share prefixes (one
// of four system texts), so that workers cache blocks and the router's
// index matters.
func prompt(i int) string {
	return fmt.Sprintf("System %d: you answer questions about the weather in a city, briefly and precisely, citing the hour. "+
		"Question %d: will it rain in city number %d tomorrow?", i%4, i, i*7919%1000)
}

// chat sends one chat completion (8 tokens) to the frontend on h and returns
// its time to first token: the first content chunk when streaming, the
// whole answer otherwise.
func chat(ctx context.Context, h *host, content string, stream bool) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{
		"model":      qwen3.ModelName,
		"messages":   []map[string]string{{"role": "user", "content": content}},
		"max_tokens": 8,
		"stream":     stream,
	})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, "http://"+h.addr+":8000/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b.Bytes()))
	}
	if !stream {
		var b bytes.Buffer
		if _, err := b.ReadFrom(resp.Body); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	var ttft time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if ttft == 0 && strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content":"`) {
			ttft = time.Since(start)
		}
		if line == "data: [DONE]" {
			return ttft, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("stream ended without [DONE]")
}

// metric sums every series of one metric (name exactly, any labels) that
// the /metrics page at url shows; 0 when it shows none.
func metric(ctx context.Context, url, name string) (float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// routerStats asks a router for its state.
func routerStats(ctx context.Context, addr string) (*routerv1.GetStatsResponse, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return routerv1.NewRouterServiceClient(cc).GetStats(sctx, &routerv1.GetStatsRequest{})
}

// indexDiff compares two routers' indexes: the distinct blocks, the
// (block, worker) pairs and each worker's blocks. It returns "" when they
// are equal, else what differs, and how many (block, worker) pairs the
// first lacks against the second.
func indexDiff(a, b *routerv1.GetStatsResponse) (string, int) {
	var diffs []string
	if a.IndexedBlocks != b.IndexedBlocks {
		diffs = append(diffs, fmt.Sprintf("blocks %d vs %d", a.IndexedBlocks, b.IndexedBlocks))
	}
	if a.IndexedEntries != b.IndexedEntries {
		diffs = append(diffs, fmt.Sprintf("entries %d vs %d", a.IndexedEntries, b.IndexedEntries))
	}
	per := func(s *routerv1.GetStatsResponse) map[string]uint64 {
		m := map[string]uint64{}
		for _, w := range s.Workers {
			m[fmt.Sprintf("%x/%d", w.InstanceId, w.DpRank)] = w.CachedBlocks
		}
		return m
	}
	pa, pb := per(a), per(b)
	for k, n := range pb {
		if pa[k] != n {
			diffs = append(diffs, fmt.Sprintf("worker %s: %d vs %d blocks", k, pa[k], n))
		}
	}
	for k, n := range pa {
		if _, ok := pb[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("worker %s: %d vs absent", k, n))
		}
	}
	missing := 0
	if b.IndexedEntries > a.IndexedEntries {
		missing = int(b.IndexedEntries - a.IndexedEntries)
	}
	return strings.Join(diffs, "; "), missing
}
