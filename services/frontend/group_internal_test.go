package frontend

import (
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// TestChoiceGroupLastSeesEveryChoice adds n choices from n goroutines at
// once, many times: exactly one add reports the last, and it returns every
// choice in index order with the usage of all of them. The group once ended
// a choice and added it under two holds of its lock, so the last to end
// could answer without a choice that had ended but was not added yet.
func TestChoiceGroupLastSeesEveryChoice(t *testing.T) {
	for _, n := range []int{2, 3, 8} {
		for round := range 300 {
			g := newChoiceGroup(nil, genParams{n: n})
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				lasts int
				chat  []openai.ChatChoice
				comp  []openai.CompletionChoice
				usage openai.Usage
			)
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					u := openai.Usage{PromptTokens: 10, CompletionTokens: uint32(i + 1), TotalTokens: 10 + uint32(i+1)}
					var last bool
					var cs []openai.ChatChoice
					var ps []openai.CompletionChoice
					var total openai.Usage
					if round%2 == 0 {
						last, cs, total = g.addChat(openai.ChatChoice{Index: i}, u)
					} else {
						last, ps, total = g.addCompletion(openai.CompletionChoice{Index: i}, u)
					}
					if last {
						mu.Lock()
						lasts++
						chat = append([]openai.ChatChoice(nil), cs...)
						comp = append([]openai.CompletionChoice(nil), ps...)
						usage = total
						mu.Unlock()
					}
				})
			}
			close(start)
			wg.Wait()
			if lasts != 1 {
				t.Fatalf("n=%d round %d: %d adds reported the last, want 1", n, round, lasts)
			}
			got := len(chat) + len(comp)
			if got != n {
				t.Fatalf("n=%d round %d: the last add returned %d choices, want %d", n, round, got, n)
			}
			for i := range n {
				idx := 0
				if round%2 == 0 {
					idx = chat[i].Index
				} else {
					idx = comp[i].Index
				}
				if idx != i {
					t.Fatalf("n=%d round %d: choice %d has index %d, want index order", n, round, i, idx)
				}
			}
			want := uint32(n * (n + 1) / 2)
			if usage.CompletionTokens != want || usage.TotalTokens != 10+want || usage.PromptTokens != 10 {
				t.Fatalf("n=%d round %d: usage %+v, want the prompt once and %d completion tokens", n, round, usage, want)
			}
		}
	}
}
