package frontend_test

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// This file validates response bodies with a JSON Schema validator against
// OpenAI's own OpenAPI description (testdata/openai/openapi.json.gz, version
// 2.3.0 of openai/openai-openapi, MIT: OpenAPI 3.1, whose schemas are JSON
// Schema 2020-12). schema_test.go's field-by-field checks say what a test
// expects of a body; these say the body is what OpenAI's schema allows,
// every nested object included.

const openapiDoc = "openapi.json"

var openapi struct {
	once     sync.Once
	err      error
	compiler *jsonschema.Compiler
	// events maps a Responses stream event's type to its schema's name
	// (the members of ResponseStreamEvent).
	events  map[string]string
	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
}

// openapiSchema compiles components/schemas/name of OpenAI's description.
func openapiSchema(t testing.TB, name string) *jsonschema.Schema {
	t.Helper()
	openapi.once.Do(func() {
		f, err := os.Open(filepath.Join("testdata", "openai", "openapi.json.gz"))
		if err != nil {
			openapi.err = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			openapi.err = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(zr)
		if err != nil {
			openapi.err = err
			return
		}
		schemas, _ := doc.(map[string]any)["components"].(map[string]any)["schemas"].(map[string]any)
		for name, sch := range schemas {
			as2020(sch, name)
		}
		openapi.events = map[string]string{}
		members, _ := schemas["ResponseStreamEvent"].(map[string]any)["anyOf"].([]any)
		for _, m := range members {
			ref, _ := m.(map[string]any)["$ref"].(string)
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			ev, _ := schemas[name].(map[string]any)
			props, _ := ev["properties"].(map[string]any)
			typ, _ := props["type"].(map[string]any)
			if enum, ok := typ["enum"].([]any); ok && len(enum) == 1 {
				openapi.events[enum[0].(string)] = name
			}
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource(openapiDoc, doc); err != nil {
			openapi.err = err
			return
		}
		openapi.compiler, openapi.schemas = c, map[string]*jsonschema.Schema{}
	})
	if openapi.err != nil {
		t.Fatalf("OpenAI's OpenAPI description: %v", openapi.err)
	}
	openapi.mu.Lock()
	defer openapi.mu.Unlock()
	if s, ok := openapi.schemas[name]; ok {
		return s
	}
	s, err := openapi.compiler.Compile(openapiDoc + "#/components/schemas/" + name)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	openapi.schemas[name] = s
	return s
}

// as2020 rewrites, in place, the two constructs of the description that are
// not JSON Schema 2020-12: OpenAPI 3.0's "nullable": true (112 places; the
// API sends null there, e.g. a stream chunk's finish_reason), read as a
// type that also admits null, and draft 2019-09's $recursiveRef "#" (in the
// recursive CompoundFilter), read as a $ref to the component it is in.
func as2020(v any, component string) {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "$recursiveAnchor")
		if r, ok := x["$recursiveRef"]; ok && r == "#" {
			delete(x, "$recursiveRef")
			x["$ref"] = "#/components/schemas/" + component
		}
		if x["nullable"] == true {
			delete(x, "nullable")
			if t, ok := x["type"].(string); ok {
				x["type"] = []any{t, "null"}
			}
			if e, ok := x["enum"].([]any); ok {
				x["enum"] = append(e, nil)
			}
		}
		for _, c := range x {
			as2020(c, component)
		}
	case []any:
		for _, c := range x {
			as2020(c, component)
		}
	}
}

// checkResponseEvent fails t unless data is a Responses stream event valid
// against the schema of its type.
func checkResponseEvent(t testing.TB, data []byte) {
	t.Helper()
	openapiSchema(t, "ResponseStreamEvent") // loads the description
	var ev struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("event: %v: %q", err, data)
	}
	name, ok := openapi.events[ev.Type]
	if !ok {
		t.Fatalf("event type %q is not one of the API's: %s", ev.Type, data)
	}
	checkOpenAPI(t, name, data)
}

// checkOpenAPI fails t unless body is valid against OpenAI's schema name.
func checkOpenAPI(t testing.TB, name string, body []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("%s: not JSON: %v: %q", name, err, body)
	}
	if err := openapiSchema(t, name).Validate(v); err != nil {
		var pretty any = string(body)
		if json.Valid(body) {
			pretty = json.RawMessage(body)
		}
		t.Fatalf("body is not a valid %s: %v\nbody: %s", name, err, pretty)
	}
}

// TestBodiesMatchOpenAPI sends each endpoint's requests, streamed and not,
// with reasoning, stop sequences, log probabilities, structured outputs and
// a cut-off answer, and validates every body and every streamed event
// against OpenAI's schema of it.
func TestBodiesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	s.addMocker(0)
	s.waitInstances(1)
	chat := `{"model":"` + testModel + `","messages":[{"role":"user","content":"Tell me a story."}]`
	completion := `{"model":"` + testModel + `","prompt":"Once upon a time"`
	responses := `{"model":"` + testModel + `","input":"Tell me about trains."`
	person := `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}`
	cases := []struct {
		name, path, body string
		status           int
		schema           string // of the body, or of each streamed event
		stream           bool
	}{
		{"chat", "/v1/chat/completions", chat + `,"max_tokens":40}`, 200, "CreateChatCompletionResponse", false},
		{"chat cut off", "/v1/chat/completions", chat + `,"max_tokens":3}`, 200, "CreateChatCompletionResponse", false},
		{"chat logprobs", "/v1/chat/completions", chat + `,"max_tokens":8,"logprobs":true,"top_logprobs":2}`, 200, "CreateChatCompletionResponse", false},
		{"chat n=2", "/v1/chat/completions", chat + `,"max_tokens":8,"n":2}`, 200, "CreateChatCompletionResponse", false},
		{"chat json_schema", "/v1/chat/completions", chat + `,"max_tokens":80,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":` + person + `}}}`, 200, "CreateChatCompletionResponse", false},
		{"chat stream", "/v1/chat/completions", chat + `,"max_tokens":40,"stream":true,"stream_options":{"include_usage":true}}`, 200, "CreateChatCompletionStreamResponse", true},
		{"chat stream logprobs", "/v1/chat/completions", chat + `,"max_tokens":8,"stream":true,"logprobs":true,"top_logprobs":1}`, 200, "CreateChatCompletionStreamResponse", true},
		{"chat stream stop", "/v1/chat/completions", chat + `,"max_tokens":40,"stream":true,"stop":["\n"]}`, 200, "CreateChatCompletionStreamResponse", true},
		{"completion", "/v1/completions", completion + `,"max_tokens":8}`, 200, "CreateCompletionResponse", false},
		{"completion logprobs", "/v1/completions", completion + `,"max_tokens":8,"logprobs":2}`, 200, "CreateCompletionResponse", false},
		{"completion stream", "/v1/completions", completion + `,"max_tokens":8,"stream":true}`, 200, "CreateCompletionResponse", true},
		{"completion echo logprobs", "/v1/completions", completion + `,"max_tokens":1,"echo":true,"logprobs":1}`, 200, "CreateCompletionResponse", false},
		{"completion stream echo logprobs", "/v1/completions", completion + `,"max_tokens":3,"stream":true,"echo":true,"logprobs":1}`, 200, "CreateCompletionResponse", true},
		{"responses", "/v1/responses", responses + `,"max_output_tokens":60}`, 200, "Response", false},
		{"responses cut off", "/v1/responses", responses + `,"max_output_tokens":3}`, 200, "Response", false},
		{"responses text.format", "/v1/responses", responses + `,"max_output_tokens":80,"text":{"format":{"type":"json_schema","name":"p","strict":true,"schema":` + person + `}}}`, 200, "Response", false},
		{"responses stream", "/v1/responses", responses + `,"max_output_tokens":60,"stream":true}`, 200, "ResponseStreamEvent", true},
		{"responses stream cut off", "/v1/responses", responses + `,"max_output_tokens":12,"stream":true}`, 200, "ResponseStreamEvent", true},
		{"responses tools", "/v1/responses", `{"model":"` + testModel + `","input":"What is the weather?","max_output_tokens":200,"tools":[` + weatherFunction + `]}`, 200, "Response", false},
		{"responses tools stream", "/v1/responses", `{"model":"` + testModel + `","input":"What is the weather?","max_output_tokens":200,"stream":true,"tool_choice":"required","tools":[` + weatherFunction + `]}`, 200, "ResponseStreamEvent", true},
		{"embeddings", "/v1/embeddings", `{"model":"` + testModel + `","input":["Tell me a story.","Once upon a time"]}`, 200, "CreateEmbeddingResponse", false},
		// encoding_format base64 answers a string where the description
		// has only the array; the npm client asks for it by default and
		// decodes it (TestNodeOpenAIClient).
		{"embeddings dimensions", "/v1/embeddings", `{"model":"` + testModel + `","input":"Once upon a time","encoding_format":"float","dimensions":32}`, 200, "CreateEmbeddingResponse", false},
		{"error", "/v1/chat/completions", chat + `,"max_tokens":0}`, 400, "ErrorResponse", false},
		{"error unknown model", "/v1/responses", `{"model":"nope","input":"hi"}`, 404, "ErrorResponse", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := s.rawPost(tc.path, tc.body, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if strings.Contains(tc.body, `"echo":true`) {
				// The description's token_logprobs and top_logprobs
				// items are not nullable, but the API (and vLLM, and the
				// evaluation harnesses reading it) give an echoed
				// prompt's first token null for both: nothing precedes it.
				body = []byte(strings.NewReplacer(`"token_logprobs":[null,`, `"token_logprobs":[0,`, `"top_logprobs":[null,`, `"top_logprobs":[{},`).Replace(string(body)))
			}
			if !tc.stream {
				checkOpenAPI(t, tc.schema, body)
				return
			}
			data, _ := sseEvents(t, body)
			if len(data) == 0 {
				t.Fatalf("no events: %q", body)
			}
			for _, d := range data {
				if d == "[DONE]" {
					continue
				}
				if tc.schema == "CreateCompletionResponse" {
					// The description gives streamed and whole completions
					// one shape, whose finish_reason is never null; the API
					// (and vLLM) send null until the last chunk.
					d = strings.Replace(d, `"finish_reason":null`, `"finish_reason":"length"`, 1)
				}
				if tc.schema == "ResponseStreamEvent" {
					checkResponseEvent(t, []byte(d))
					continue
				}
				checkOpenAPI(t, tc.schema, []byte(d))
			}
		})
	}
	resp, err := s.http.Get(s.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	checkOpenAPI(t, "ListModelsResponse", []byte(b.String()))
}
