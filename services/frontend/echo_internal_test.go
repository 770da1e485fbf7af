package frontend

import (
	"errors"
	"testing"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// TestPromptLogprobsFromWorker covers what the frontend does with the
// prompt log probabilities a worker returns for echo with logprobs: it asks
// until one attempt delivered them (not for a one-token prompt, whose only
// token has none); a worker that returns none does not compute them, which
// is the client's 400 naming echo (a Python or Node worker that ignores the
// field); a wrong count is the worker's failure; the right count reaches
// the sink once.
func TestPromptLogprobsFromWorker(t *testing.T) {
	one := uint32(1)
	lps := func(n int) []*workerv1.TokenLogprob {
		out := make([]*workerv1.TokenLogprob, n)
		for i := range out {
			out[i] = &workerv1.TokenLogprob{Logprob: -0.5}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		prompt  []uint32
		ask     *uint32
		got     []*workerv1.TokenLogprob
		wants   bool  // whether an attempt asks
		err     error // of takePromptLogprobs, when it asks
		invalid bool  // the error is the client's (param echo)
	}{
		{"not asked", []uint32{1, 2, 3}, nil, nil, false, nil, false},
		{"one-token prompt", []uint32{1}, &one, nil, false, nil, false},
		{"delivered", []uint32{1, 2, 3}, &one, lps(2), true, nil, false},
		{"worker ignores the field", []uint32{1, 2, 3}, &one, nil, true, ErrInvalidRequest, true},
		{"wrong count", []uint32{1, 2, 3}, &one, lps(3), true, ErrWorkerFailed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var took [][]*workerv1.TokenLogprob
			j := &job{prompt: tc.prompt, p: genParams{promptLogprobs: tc.ask}}
			j.promptLogprobs = func(l []*workerv1.TokenLogprob) { took = append(took, l) }
			if got := j.wantsPromptLogprobs(); got != tc.wants {
				t.Fatalf("wantsPromptLogprobs %v, want %v", got, tc.wants)
			}
			req := (&Service{}).generateRequest("r", j, tc.prompt, nil, 0, nil)
			if (req.PromptLogprobs != nil) != tc.wants {
				t.Fatalf("generate request prompt_logprobs %v, want asked: %v", req.PromptLogprobs, tc.wants)
			}
			if !tc.wants {
				return
			}
			err := j.takePromptLogprobs(0xab, tc.got)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			var pe *openai.ParamError
			if errors.As(err, &pe) != tc.invalid || (tc.invalid && pe.Param != "echo") {
				t.Fatalf("error %v: param error %v, want %v naming echo", err, pe, tc.invalid)
			}
			if err != nil {
				if len(took) != 0 || !j.wantsPromptLogprobs() {
					t.Fatalf("after a failure: the sink took %d, asks again: %v", len(took), j.wantsPromptLogprobs())
				}
				return
			}
			if len(took) != 1 || len(took[0]) != len(tc.got) || j.wantsPromptLogprobs() {
				t.Fatalf("the sink took %d lists, the next attempt asks again: %v", len(took), j.wantsPromptLogprobs())
			}
		})
	}
}
