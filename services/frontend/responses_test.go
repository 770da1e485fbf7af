package frontend_test

import (
	"encoding/json"
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
			{`{"model":"` + testModel + `","input":"hi","tools":[{"type":"web_search"}]}`, "tools[0].type"},
			{`{"model":"` + testModel + `","input":"hi","tools":[{"type":"function"}]}`, "tools[0]"},
			{`{"model":"` + testModel + `","input":"hi","tool_choice":"required"}`, "tool_choice"},
			{`{"model":"` + testModel + `","input":"hi","tools":[` + weatherFunction + `],"tool_choice":{"type":"file_search"}}`, "tool_choice"},
			{`{"model":"` + testModel + `","input":"hi","tools":[` + weatherFunction + `],"tool_choice":{"type":"function","name":"nope"}}`, "tool_choice"},
			{`{"model":"` + testModel + `","input":"hi","tools":[` + weatherFunction + `],"max_tool_calls":0}`, "max_tool_calls"},
			{`{"model":"` + testModel + `","input":[{"type":"item_reference","id":"fc_1"}]}`, "input[0].type"},
			{`{"model":"` + testModel + `","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id"},
			{`{"model":"` + testModel + `","input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`, "input[0].name"},
			{`{"model":"` + testModel + `","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{"}]}`, "input[0].arguments"},
			{`{"model":"` + testModel + `","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id"},
			{`{"model":"` + testModel + `","input":[{"type":"reasoning","summary":[]}]}`, "input"},
			{`{"model":"` + testModel + `","input":[{"type":"input_image"}]}`, "input[0].type"},
			{`{"model":"` + testModel + `"}`, "input"},
		} {
			code, body := s.post("/v1/responses", tc.body, nil)
			if e := errorObject(t, body); code != 400 || e["param"] != tc.param {
				t.Errorf("%s: %d %v, want 400 on %s", tc.body, code, body, tc.param)
			}
		}
	})

	t.Run("tools", func(t *testing.T) {
		body := `{"model":"` + testModel + `","input":"What is the weather in Paris?","max_output_tokens":200,"tools":[` + weatherFunction + `]}`
		code, raw := s.post("/v1/responses", body, nil)
		resp := decodeResponse(t, code, raw)
		// The mocker calls the first tool, in Qwen3's <tool_call> form with
		// whitespace around it: one function_call item and no message.
		calls := resp.items("function_call")
		if len(calls) != 1 || len(resp.items("message")) != 0 || resp.Status != "completed" {
			t.Fatalf("output = %s", raw)
		}
		c := calls[0]
		var args map[string]any
		if c.Name != "get_weather" || !strings.HasPrefix(c.CallID, "call_") || !strings.HasPrefix(c.ID, "fc_") || c.Status != "completed" ||
			json.Unmarshal([]byte(c.Arguments), &args) != nil || args["city"] != "switchyard" {
			t.Fatalf("call = %+v", c)
		}
		if string(resp.ToolChoice) != `"auto"` || len(resp.Tools) != 1 || !resp.ParallelToolCalls {
			t.Fatalf("echoed tool settings: %s", raw)
		}
		// The call's output sent back as input gets a text answer.
		items, _ := json.Marshal([]any{
			map[string]any{"role": "user", "content": "What is the weather in Paris?"},
			map[string]any{"type": "function_call", "call_id": c.CallID, "name": c.Name, "arguments": c.Arguments},
			map[string]any{"type": "function_call_output", "call_id": c.CallID, "output": "18 degrees and sunny"},
		})
		code, raw = s.post("/v1/responses", `{"model":"`+testModel+`","max_output_tokens":40,"tools":[`+weatherFunction+`],"input":`+string(items)+`}`, nil)
		resp = decodeResponse(t, code, raw)
		if len(resp.items("function_call")) != 0 || len(resp.items("message")) != 1 || resp.items("message")[0].Content[0].Text == "" {
			t.Fatalf("answer to the tool's output = %s", raw)
		}
	})

	t.Run("tools through openai-go", func(t *testing.T) {
		tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Strict: openai.Bool(false),
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}}
		question := responses.ResponseInputItemParamOfMessage("What is the weather in Paris?", responses.EasyInputMessageRoleUser)
		resp, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(200), Tools: tools,
			ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
			Input:      responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{question}}})
		if err != nil {
			t.Fatal(err)
		}
		var call *responses.ResponseOutputItemUnion
		for i, it := range resp.Output {
			if it.Type == "function_call" {
				call = &resp.Output[i]
			}
		}
		if call == nil || call.Name != "get_weather" || call.CallID == "" || !json.Valid([]byte(call.Arguments.OfString)) {
			t.Fatalf("no get_weather call: %s", resp.RawJSON())
		}
		out := responses.ResponseInputItemParamOfFunctionCallOutput("18 degrees and sunny")
		out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		answer, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(40), Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{question,
				responses.ResponseInputItemParamOfFunctionCall(call.Arguments.OfString, call.CallID, call.Name), out}}})
		if err != nil {
			t.Fatal(err)
		}
		if answer.OutputText() == "" {
			t.Fatalf("answer to the tool's output: %s", answer.RawJSON())
		}
	})

	t.Run("tools streamed", func(t *testing.T) {
		body := `{"model":"` + testModel + `","input":"What is the weather in Paris?","max_output_tokens":200,"stream":true,"tools":[` + weatherFunction + `]}`
		resp, raw := s.rawPost("/v1/responses", body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, raw)
		}
		data, _ := sseEvents(t, raw)
		var args, done string
		var added, itemDone int
		var final responseBody
		for _, d := range data {
			var ev struct {
				Type      string          `json:"type"`
				Delta     string          `json:"delta"`
				Arguments string          `json:"arguments"`
				Name      string          `json:"name"`
				Item      answerOutput    `json:"item"`
				Response  json.RawMessage `json:"response"`
			}
			if err := json.Unmarshal([]byte(d), &ev); err != nil {
				t.Fatalf("%q: %v", d, err)
			}
			switch ev.Type {
			case "response.output_item.added":
				if ev.Item.Type == "function_call" {
					added++
				}
			case "response.function_call_arguments.delta":
				args += ev.Delta
			case "response.function_call_arguments.done":
				if ev.Name != "get_weather" {
					t.Fatalf("arguments.done names %q", ev.Name)
				}
				done = ev.Arguments
			case "response.output_item.done":
				if ev.Item.Type == "function_call" {
					itemDone++
				}
			case "response.output_text.delta":
				t.Fatalf("text streamed beside the call: %q", d)
			case "response.completed":
				if err := json.Unmarshal(ev.Response, &final); err != nil {
					t.Fatal(err)
				}
			}
		}
		calls := final.items("function_call")
		if added != 1 || itemDone != 1 || args == "" || args != done || len(calls) != 1 || calls[0].Arguments != args {
			t.Fatalf("added %d done %d, arguments %q / %q, final %+v", added, itemDone, args, done, final.Output)
		}
	})

	t.Run("tool_choice none", func(t *testing.T) {
		body := `{"model":"` + testModel + `","input":"What is the weather in Paris?","max_output_tokens":20,"tool_choice":"none","tools":[` + weatherFunction + `]}`
		code, raw := s.post("/v1/responses", body, nil)
		resp := decodeResponse(t, code, raw)
		if len(resp.items("function_call")) != 0 || len(resp.items("message")) != 1 || string(resp.ToolChoice) != `"none"` {
			t.Fatalf("output = %s", raw)
		}
	})
}

// weatherFunction is a Responses API function tool.
const weatherFunction = `{"type":"function","name":"get_weather","description":"The current weather of a city.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":false}`

// responseBody is what the tests read of a Responses API body.
type responseBody struct {
	Status            string            `json:"status"`
	Output            []answerOutput    `json:"output"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	Tools             []json.RawMessage `json:"tools"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
}

type answerOutput struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Status    string `json:"status"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Text string `json:"text"`
	} `json:"content"`
}

func (r responseBody) items(typ string) []answerOutput {
	var out []answerOutput
	for _, it := range r.Output {
		if it.Type == typ {
			out = append(out, it)
		}
	}
	return out
}

func decodeResponse(t *testing.T, code int, body map[string]any) responseBody {
	t.Helper()
	raw, _ := json.Marshal(body)
	var r responseBody
	if code != 200 || json.Unmarshal(raw, &r) != nil {
		t.Fatalf("status %d: %s", code, raw)
	}
	return r
}
