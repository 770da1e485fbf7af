package adapter

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

func lp(v float64) *float64 { return &v }

func rank(r int) *int { return &r }

func TestGeneratedLogprobs(t *testing.T) {
	two := []*workerv1.TokenLogprob{
		{Logprob: -0.5, Top: []*workerv1.TopLogprob{{TokenId: 7, Logprob: -0.5}, {TokenId: 3, Logprob: -1}}},
		{Logprob: -2, Top: []*workerv1.TopLogprob{{TokenId: 1, Logprob: -0.25}, {TokenId: 8, Logprob: -2}}},
	}
	for _, tc := range []struct {
		name string
		in   *engineLogprobs
		n    int
		top  uint32
		want []*workerv1.TokenLogprob
	}{
		{"none sent", nil, 2, 2, nil},
		{"ids, most likely first", &engineLogprobs{
			Tokens:        []string{"token_id:7", "token_id:8"},
			TokenLogprobs: []*float64{lp(-0.5), lp(-2)},
			TopLogprobs:   []map[string]float64{{"token_id:3": -1, "token_id:7": -0.5}, {"token_id:8": -2, "token_id:1": -0.25}},
		}, 2, 2, two},
		{"at most top alternatives", &engineLogprobs{
			TokenLogprobs: []*float64{lp(-0.5)},
			TopLogprobs:   []map[string]float64{{"token_id:3": -1, "token_id:7": -0.5, "token_id:9": -3}},
		}, 1, 1, []*workerv1.TokenLogprob{{Logprob: -0.5, Top: []*workerv1.TopLogprob{{TokenId: 7, Logprob: -0.5}}}}},
		{"alternatives as text are left out", &engineLogprobs{
			TokenLogprobs: []*float64{lp(-0.5)},
			TopLogprobs:   []map[string]float64{{" the": -0.5, "token_id:4": -0.7}},
		}, 1, 2, []*workerv1.TokenLogprob{{Logprob: -0.5, Top: []*workerv1.TopLogprob{{TokenId: 4, Logprob: -0.7}}}}},
		{"not one per token", &engineLogprobs{TokenLogprobs: []*float64{lp(-1)}}, 2, 1, nil},
		{"no top maps", &engineLogprobs{TokenLogprobs: []*float64{lp(-1)}}, 1, 0, []*workerv1.TokenLogprob{{Logprob: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := generatedLogprobs(tc.in, tc.n, tc.top)
			if len(got) != len(tc.want) {
				t.Fatalf("%d entries, want %d: %v", len(got), len(tc.want), got)
			}
			for i := range got {
				if !proto.Equal(got[i], tc.want[i]) {
					t.Fatalf("entry %d: %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPromptLogprobs(t *testing.T) {
	prompt := []uint32{11, 22, 33}
	good := []map[string]enginePromptLogprob{
		nil,
		{"22": {Logprob: -0.1, Rank: rank(1)}, "5": {Logprob: -3, Rank: rank(2)}},
		// The prompt token ranked below the top asked for: its own
		// probability, not among the alternatives.
		{"33": {Logprob: -4, Rank: rank(3)}, "6": {Logprob: -0.2, Rank: rank(1)}, "9": {Logprob: -1, Rank: rank(2)}},
	}
	got, err := promptLogprobs(good, prompt, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []*workerv1.TokenLogprob{
		{Logprob: -0.1, Top: []*workerv1.TopLogprob{{TokenId: 22, Logprob: -0.1}, {TokenId: 5, Logprob: -3}}},
		{Logprob: -4, Top: []*workerv1.TopLogprob{{TokenId: 6, Logprob: -0.2}, {TokenId: 9, Logprob: -1}}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("entry %d: %v, want %v", i, got[i], want[i])
		}
	}
	for _, tc := range []struct {
		name string
		raw  []map[string]enginePromptLogprob
	}{
		{"too few", good[:2]},
		{"prompt token missing", []map[string]enginePromptLogprob{nil, good[1], {"6": {Logprob: -0.2, Rank: rank(1)}}}},
		{"key not an id", []map[string]enginePromptLogprob{nil, good[1], {"33": {Logprob: -1, Rank: rank(1)}, "x": {Logprob: -2, Rank: rank(2)}}}},
	} {
		if _, err := promptLogprobs(tc.raw, prompt, 2); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestRelayLogprobs reads the generated tokens' log probabilities from a
// streamed answer, one chunk at a time.
func TestRelayLogprobs(t *testing.T) {
	var out []*workerv1.GenerateResponse
	one := uint32(1)
	sse := `data: {"choices":[{"text":"a","token_ids":[5],"logprobs":{"tokens":["token_id:5"],"token_logprobs":[-0.5],"top_logprobs":[{"token_id:5":-0.5}]}}]}

data: {"choices":[{"text":"b","token_ids":[6],"finish_reason":"length","logprobs":{"tokens":["token_id:6"],"token_logprobs":[-1.5],"top_logprobs":[{"token_id:2":-0.1}]}}]}

data: [DONE]

`
	err := relay(t.Context(), strings.NewReader(sse), 3, &one, func(r *workerv1.GenerateResponse) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || len(out[0].Logprobs) != 1 || out[0].Logprobs[0].Logprob != -0.5 || len(out[1].Logprobs) != 1 ||
		out[1].Logprobs[0].Logprob != -1.5 || out[1].Logprobs[0].Top[0].TokenId != 2 {
		t.Fatalf("responses %v", out)
	}
}

// TestGenerateWithPromptLogprobs runs generate against a stand-in of
// vLLM's completions endpoint that, as vLLM does, refuses prompt_logprobs
// on a streamed request and answers them unstreamed: the adapter asks
// unstreamed, with the tokens written as ids, and answers with one
// response holding the generated tokens, both kinds of log probabilities
// and usage; an engine that leaves prompt_logprobs out is refused by name.
func TestGenerateWithPromptLogprobs(t *testing.T) {
	var omit bool
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req completionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.Stream && req.PromptLogprobs != nil && *req.PromptLogprobs > 0 {
			http.Error(w, `{"object":"error","message":"`+"`prompt_logprobs` are not available when `stream=True`."+`","code":400}`, http.StatusBadRequest)
			return
		}
		if !req.ReturnTokensAsTokenIDs {
			http.Error(w, "tokens as text", http.StatusBadRequest)
			return
		}
		prompt := []any{nil}
		for _, id := range req.Prompt[1:] {
			prompt = append(prompt, map[string]any{jsonID(id): map[string]any{"logprob": -0.25, "rank": 1, "decoded_token": "x"}})
		}
		choice := map[string]any{"index": 0, "text": "ok", "token_ids": []uint32{42}, "finish_reason": "length",
			"logprobs": map[string]any{"tokens": []string{"token_id:42"}, "token_logprobs": []float64{-0.75}, "top_logprobs": []map[string]float64{{"token_id:42": -0.75}}}}
		if !omit {
			choice["prompt_logprobs"] = prompt
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{choice},
			"usage": map[string]any{"prompt_tokens": len(req.Prompt), "completion_tokens": 1, "prompt_tokens_details": map[string]any{"cached_tokens": 0}}})
	}))
	defer eng.Close()
	h := generate(eng.Client(), eng.URL, "m", &legs{})
	one := uint32(1)
	req := &workerv1.GenerateRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}, MaxTokens: 1, Logprobs: &one, PromptLogprobs: &one}
	var out []*workerv1.GenerateResponse
	send := func(r *workerv1.GenerateResponse) error { out = append(out, r); return nil }
	if err := h(t.Context(), req, send); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 {
		t.Fatalf("%d responses, want 1", len(out))
	}
	r := out[0]
	if len(r.TokenIds) != 1 || r.TokenIds[0] != 42 || r.FinishReason != workerv1.FinishReason_FINISH_REASON_LENGTH ||
		len(r.Logprobs) != 1 || r.Logprobs[0].Logprob != -0.75 || len(r.PromptLogprobs) != 3 || r.PromptLogprobs[2].Logprob != -0.25 ||
		r.PromptLogprobs[2].Top[0].TokenId != 4 || r.Usage.GetPromptTokens() != 4 {
		t.Fatalf("response %v", r)
	}
	omit = true
	err := h(t.Context(), req, send)
	var he *transport.HandlerError
	if !errors.As(err, &he) || he.Code != transport.CodeInvalidArgument || !strings.Contains(he.Message, "prompt_logprobs") {
		t.Fatalf("an answer without prompt_logprobs: %v", err)
	}
	// A leg of a disaggregated request does not carry them.
	leg := proto.Clone(req).(*workerv1.GenerateRequest)
	leg.Leg = workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL
	if err := h(t.Context(), leg, send); !errors.As(err, &he) || he.Code != transport.CodeInvalidArgument {
		t.Fatalf("prompt log probabilities on a leg: %v", err)
	}
}

func jsonID(id uint32) string {
	b, _ := json.Marshal(id)
	return string(b)
}

// FuzzDecodeWhole feeds the unstreamed answer's decoder anything: it never
// panics, and an answer it takes has one prompt entry per prompt token
// after the first, each with at most the alternatives asked for.
func FuzzDecodeWhole(f *testing.F) {
	f.Add([]byte(`{"choices":[{"text":"ok","token_ids":[42],"finish_reason":"length","prompt_logprobs":[null,{"2":{"logprob":-0.5,"rank":1}},{"3":{"logprob":-1,"rank":2},"9":{"logprob":-0.1,"rank":1}}],"logprobs":{"tokens":["token_id:42"],"token_logprobs":[-0.7],"top_logprobs":[{"token_id:42":-0.7}]}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
	f.Add([]byte(`{"choices":[{"text":"","token_ids":[],"prompt_logprobs":[null]}]}`))
	f.Add([]byte(`{"object":"error","message":"bad","code":400}`))
	f.Add([]byte(`{"choices":[]}`))
	f.Add([]byte(`{"choices":[{"prompt_logprobs":[null,{"x":{"logprob":1}}]}]}`))
	one := uint32(1)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := &workerv1.GenerateRequest{TokenIds: []uint32{1, 2, 3}, Logprobs: &one, PromptLogprobs: &one}
		out, err := decodeWhole(body, req)
		if err != nil {
			return
		}
		if len(out.PromptLogprobs) != len(req.TokenIds)-1 {
			t.Fatalf("%d prompt entries for %d tokens", len(out.PromptLogprobs), len(req.TokenIds))
		}
		for _, e := range append(out.PromptLogprobs, out.Logprobs...) {
			if len(e.Top) > 1 {
				t.Fatalf("%d alternatives, asked for 1", len(e.Top))
			}
		}
	})
}

// TestGuidedDecodingToEngine checks what the engine is asked for a request
// whose output must have a structure: OpenAI's response_format, json_object
// as it is, json_schema with the schema as an object, its name (or
// "output") and strict; a schema that is not JSON is refused.
func TestGuidedDecodingToEngine(t *testing.T) {
	var got json.RawMessage
	var gotSchema string
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ResponseFormat json.RawMessage `json:"response_format"`
			JSONSchema     string          `json:"json_schema"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		got, gotSchema = req.ResponseFormat, req.JSONSchema
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[{\"text\":\"{}\",\"token_ids\":[5],\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}))
	defer eng.Close()
	h := generate(eng.Client(), eng.URL, "m", &legs{})
	send := func(*workerv1.GenerateResponse) error { return nil }
	for _, tc := range []struct {
		name string
		g    *workerv1.GuidedDecoding
		want string // "" expects a refusal
		// schema is SGLang's json_schema field.
		schema string
	}{
		{"none", nil, "null", ""},
		{"json_object", &workerv1.GuidedDecoding{Format: &workerv1.GuidedDecoding_JsonObject{JsonObject: true}}, `{"type":"json_object"}`, `{"type":"object"}`},
		{"json_schema", &workerv1.GuidedDecoding{Name: "person", Format: &workerv1.GuidedDecoding_JsonSchema{JsonSchema: `{"type":"object"}`}},
			`{"json_schema":{"name":"person","schema":{"type":"object"},"strict":true},"type":"json_schema"}`, `{"type":"object"}`},
		{"unnamed schema", &workerv1.GuidedDecoding{Format: &workerv1.GuidedDecoding_JsonSchema{JsonSchema: `{"type":"string"}`}},
			`{"json_schema":{"name":"output","schema":{"type":"string"},"strict":true},"type":"json_schema"}`, `{"type":"string"}`},
		{"schema not JSON", &workerv1.GuidedDecoding{Format: &workerv1.GuidedDecoding_JsonSchema{JsonSchema: `{"type":`}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gotSchema = nil, ""
			err := h(t.Context(), &workerv1.GenerateRequest{TokenIds: []uint32{1, 2}, MaxTokens: 1, GuidedDecoding: tc.g}, send)
			if tc.want == "" {
				var he *transport.HandlerError
				if !errors.As(err, &he) || he.Code != transport.CodeInvalidArgument {
					t.Fatalf("err %v, want invalid_argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "null" {
				if got != nil {
					t.Fatalf("response_format %s, want none", got)
				}
				return
			}
			if string(got) != tc.want || gotSchema != tc.schema {
				t.Fatalf("response_format %s, json_schema %q; want %s, %q", got, gotSchema, tc.want, tc.schema)
			}
		})
	}
}

// TestLoRAModelToEngine: a request with a LoRA adapter asks the engine
// for the adapter by name as its model, as vLLM serves adapters; one
// without asks for the base model.
func TestLoRAModelToEngine(t *testing.T) {
	var got string
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		got = req.Model
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[{\"text\":\"x\",\"token_ids\":[5],\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}))
	defer eng.Close()
	h := generate(eng.Client(), eng.URL, "base", &legs{})
	send := func(*workerv1.GenerateResponse) error { return nil }
	for _, tc := range []struct{ lora, want string }{{"", "base"}, {"sql-lora", "sql-lora"}} {
		if err := h(t.Context(), &workerv1.GenerateRequest{TokenIds: []uint32{1, 2}, MaxTokens: 1, LoraName: tc.lora}, send); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("lora %q: engine asked for model %q, want %q", tc.lora, got, tc.want)
		}
	}
}
