package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// TestRefusedFields: fields the frontend does not act on are a 400 that
// names them, unless they ask for nothing; supported and bookkeeping fields
// pass.
func TestRefusedFields(t *testing.T) {
	const msgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
	const prompt = `"model":"m","prompt":"hi"`
	for _, tc := range []struct {
		name, body string
		chat       bool
		param      string // "" = accepted
		responses  bool
	}{
		{"responses store", `{"model":"m","input":"hi","store":true}`, false, "store", true},
		{"responses no store", `{"model":"m","input":"hi","store":false,"user":"u","tool_choice":"auto"}`, false, "", true},
		{"responses reasoning", `{"model":"m","input":"hi","reasoning":{"effort":"low"}}`, false, "reasoning", true},
		{"responses unknown", `{"model":"m","input":"hi","modalities":["text"]}`, false, "modalities", true},
		{"json mode", `{` + msgs + `,"response_format":{"type":"json_object"}}`, true, "", false},
		{"json schema", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}`, true, "", false},
		{"json schema invalid", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":1}}}}`, true, "response_format.json_schema.schema", false},
		{"responses json schema", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}}}`, false, "", true},
		{"responses format unknown", `{"model":"m","input":"hi","text":{"format":{"type":"xml"}}}`, false, "text.format.type", true},
		{"text format", `{` + msgs + `,"response_format":{"type":"text"}}`, true, "", false},
		{"null format", `{` + msgs + `,"response_format":null}`, true, "", false},
		{"logit bias", `{` + msgs + `,"logit_bias":{"50256":-100}}`, true, "logit_bias", false},
		{"empty logit bias", `{` + msgs + `,"logit_bias": { } }`, true, "", false},
		{"audio", `{` + msgs + `,"modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"}}`, true, "modalities", false},
		{"text modality", `{` + msgs + `,"modalities":["text"]}`, true, "", false},
		{"prediction", `{` + msgs + `,"prediction":{"type":"content","content":"x"}}`, true, "prediction", false},
		{"functions", `{` + msgs + `,"functions":[{"name":"f"}]}`, true, "functions", false},
		{"reasoning effort", `{` + msgs + `,"reasoning_effort":"high"}`, true, "reasoning_effort", false},
		{"store", `{` + msgs + `,"store":true}`, true, "store", false},
		{"no store", `{` + msgs + `,"store":false}`, true, "", false},
		{"flex tier", `{` + msgs + `,"service_tier":"flex"}`, true, "service_tier", false},
		{"auto tier", `{` + msgs + `,"service_tier":"auto"}`, true, "", false},
		{"unknown", `{` + msgs + `,"guided_json":{"type":"object"}}`, true, "guided_json", false},
		{"escaped unknown", `{` + msgs + `,"gu\u0069ded_choice":["a"]}`, true, "guided_choice", false},
		{"bookkeeping", `{` + msgs + `,"user":"u1","metadata":{"k":"v"},"safety_identifier":"s","prompt_cache_key":"c"}`, true, "", false},
		{"supported", `{` + msgs + `,"temperature":0.5,"top_k":3,"stop":["\"}"],"seed":1,"logprobs":true,"top_logprobs":2,"stream":false,` +
			`"max_completion_tokens":9,"chat_template_kwargs":{"enable_thinking":false},"n":1,"parallel_tool_calls":null}`, true, "", false},
		{"completion best_of", `{` + prompt + `,"best_of":3}`, false, "best_of", false},
		{"completion best_of 1", `{` + prompt + `,"best_of":1,"user":"x"}`, false, "", false},
		{"completion logit bias", `{` + prompt + `,"logit_bias":{"1":5}}`, false, "logit_bias", false},
		{"completion unknown", `{` + prompt + `,"messages":[]}`, false, "messages", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			switch {
			case tc.responses:
				_, _, _, err = decodeResponses([]byte(tc.body))
			case tc.chat:
				_, _, err = decodeChat([]byte(tc.body))
			default:
				_, _, _, _, err = decodeCompletion([]byte(tc.body))
			}
			if tc.param == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var pe *openai.ParamError
			if !errors.As(err, &pe) || pe.Param != tc.param {
				t.Fatalf("err = %v, want a 400 naming %q", err, tc.param)
			}
		})
	}
}

// FuzzTopLevelFields: on any JSON object, the scan finds the members
// json.Unmarshal finds, with the same values.
func FuzzTopLevelFields(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a" : "x\"}" , "b":[1,{"c":"]"}],"d":null}`, `{"\u0061":true,"b":-1.5e3}`,
		`{"a":"\\\\","b":"\\\""}`, " {\n\"a\"\t:\r{}\n}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want map[string]json.RawMessage
		if json.Unmarshal(body, &want) != nil || want == nil {
			return
		}
		got := map[string]json.RawMessage{}
		err := topLevelFields(body, func(name, raw []byte) error {
			got[string(name)] = raw
			return nil
		})
		if err != nil {
			t.Fatalf("topLevelFields(%q): %v", body, err)
		}
		eq := func(a, b json.RawMessage) bool {
			var ca, cb bytes.Buffer
			return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
		}
		if !maps.EqualFunc(got, want, eq) {
			t.Fatalf("topLevelFields(%q) = %q, want %q", body, got, want)
		}
	})
}
