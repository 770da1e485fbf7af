package frontend_test

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestRouterReports: with the router service, prefill completions and frees
// travel in batches on the Report stream, and once requests end (streamed,
// not streamed, or cancelled by the client) the router's books hold none of
// them: its state is what the unary calls left.
func TestRouterReports(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{plane: transport.PlaneTCP})
	s.addMocker(0)
	s.waitInstances(1)
	ctx := testCtx(t)
	params := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(8),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about trains.")}}
	for range 3 {
		if _, err := s.client.Chat.Completions.New(ctx, params); err != nil {
			t.Fatal(err)
		}
		st := s.client.Chat.Completions.NewStreaming(ctx, params)
		for st.Next() {
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	// A client that goes away after the first chunk.
	cctx, cancel := context.WithCancel(ctx)
	long := params
	long.MaxTokens = openai.Int(2000)
	st := s.client.Chat.Completions.NewStreaming(cctx, long)
	if !st.Next() {
		t.Fatalf("no first chunk: %v", st.Err())
	}
	cancel()
	st.Close()

	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		busy := uint32(0)
		for _, w := range s.router.Core().Stats().GetWorkers() {
			busy += w.GetRequests()
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router still holds %d requests", busy)
		}
	}
	if n := s.metric("switchyard_frontend_router_fallback_total", ""); n != 0 {
		t.Fatalf("%v requests fell back to in-process routing", n)
	}
}
