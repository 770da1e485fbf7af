package frontend_test

import (
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestResponsesAPI runs /v1/responses through openai-go: text and message
// input, streamed with the API's event types and not, reasoning as its own
// output item, and refused fields named.
func TestResponsesAPI(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startStack(t, stackOpts{plane: transport.PlaneTCP})
	s.addMocker(0)
	s.waitInstances(1)

	t.Run("text input", func(t *testing.T) {
		resp, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(30),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me about trains.")}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Object != "response" || resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" ||
			resp.OutputText() == "" || strings.Contains(resp.OutputText(), "think>") || resp.Usage.OutputTokens != 30 || resp.Usage.InputTokens == 0 {
			t.Fatalf("response = %s", resp.RawJSON())
		}
		if len(resp.Output) != 2 || resp.Output[0].Type != "reasoning" || resp.Output[1].Type != "message" {
			t.Fatalf("output items = %s", resp.RawJSON())
		}
		// The mocker thinks for a few tokens, then answers until cut off:
		// its message is incomplete like the response.
		if r := resp.Usage.OutputTokensDetails.ReasoningTokens; r <= 0 || r >= resp.Usage.OutputTokens {
			t.Fatalf("reasoning_tokens %d of %d output tokens", r, resp.Usage.OutputTokens)
		}
		if resp.Output[1].Status != "incomplete" {
			t.Fatalf("message status %q in an incomplete response", resp.Output[1].Status)
		}
	})

	t.Run("cut off in the reasoning", func(t *testing.T) {
		resp, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(3),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me about trains.")}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.OutputTokens != 3 || resp.Usage.OutputTokensDetails.ReasoningTokens != 3 {
			t.Fatalf("usage %s, want every output token counted as reasoning", resp.Usage.RawJSON())
		}
	})

	t.Run("no reasoning", func(t *testing.T) {
		resp, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(20),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me about trains.")}},
			option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.OutputTokensDetails.ReasoningTokens != 0 || len(resp.Output) != 1 {
			t.Fatalf("response %s, want no reasoning", resp.RawJSON())
		}
	})

	t.Run("messages streamed", func(t *testing.T) {
		st := s.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(30),
			Instructions: openai.String("Answer briefly."),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage("Hello!", responses.EasyInputMessageRoleUser)}}})
		defer st.Close()
		var types []string
		var text strings.Builder
		var final responses.Response
		for st.Next() {
			ev := st.Current()
			types = append(types, ev.Type)
			if ev.Type == "response.output_text.delta" {
				text.WriteString(ev.Delta)
			}
			if ev.Type == "response.incomplete" || ev.Type == "response.completed" {
				final = ev.Response
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.reasoning_text.delta"}
		if len(types) < 10 || strings.Join(types[:4], ",") != strings.Join(want, ",") || types[len(types)-1] != "response.incomplete" {
			t.Fatalf("event types %v", types)
		}
		for _, typ := range []string{"response.reasoning_text.done", "response.content_part.added", "response.output_text.done", "response.content_part.done", "response.output_item.done"} {
			if !strings.Contains(strings.Join(types, ","), typ) {
				t.Fatalf("no %s event in %v", typ, types)
			}
		}
		if text.Len() == 0 || final.OutputText() != text.String() || final.Usage.OutputTokens != 30 {
			t.Fatalf("streamed %q, final %s", text.String(), final.RawJSON())
		}
	})

	t.Run("refused fields", func(t *testing.T) {
		for _, tc := range []struct{ body, param string }{
			{`{"model":"` + testModel + `","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id"},
			{`{"model":"` + testModel + `","input":"hi","tools":[{"type":"web_search"}]}`, "tools"},
			{`{"model":"` + testModel + `","input":[{"type":"input_image"}]}`, "input[0].type"},
			{`{"model":"` + testModel + `"}`, "input"},
		} {
			code, body := s.post("/v1/responses", tc.body, nil)
			if e := errorObject(t, body); code != 400 || e["param"] != tc.param {
				t.Errorf("%s: %d %v, want 400 on %s", tc.body, code, body, tc.param)
			}
		}
	})
}
