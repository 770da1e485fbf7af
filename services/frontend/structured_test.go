package frontend_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard-llm/switchyard/pkg/guided"
)

// personSchema is a strict schema as clients send one: every property
// required, no others allowed.
var personSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"name":    map[string]any{"type": "string", "minLength": 1},
		"age":     map[string]any{"type": "integer", "minimum": 0},
		"hobbies": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		"role":    map[string]any{"type": "string", "enum": []any{"admin", "user"}},
	},
	"required":             []any{"name", "age", "hobbies", "role"},
	"additionalProperties": false,
}

// mustValidate checks that text is JSON valid against schema.
func mustValidate(t *testing.T, schema any, text string) {
	t.Helper()
	raw, _ := json.Marshal(schema)
	s, err := guided.Compile(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate([]byte(text)); err != nil {
		t.Fatalf("%q: %v", text, err)
	}
}

// TestStructuredOutputs asks for JSON through openai-go on chat (a strict
// json_schema, streamed and not; json_object) and /v1/responses
// (text.format json_schema): every answer validates against its schema.
// An invalid schema is a 400 naming the field.
func TestStructuredOutputs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := startStack(t, stackOpts{})
	s.addMocker(0)
	s.waitInstances(1)
	schemaFormat := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: personSchema, Strict: openai.Bool(true)}}}

	t.Run("chat json_schema", func(t *testing.T) {
		p := chatParams("Describe a person.", 200)
		p.ResponseFormat = schemaFormat
		resp, err := s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].FinishReason != "stop" {
			t.Fatalf("finish %q, content %q", resp.Choices[0].FinishReason, resp.Choices[0].Message.Content)
		}
		mustValidate(t, personSchema, resp.Choices[0].Message.Content)
	})
	t.Run("chat json_schema with thinking, streamed", func(t *testing.T) {
		p := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(200), ResponseFormat: schemaFormat,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe a person.")}}
		text, finish, _, err := streamChat(ctx, s.client, p)
		if err != nil {
			t.Fatal(err)
		}
		if finish != "stop" {
			t.Fatalf("finish %q, content %q", finish, text)
		}
		mustValidate(t, personSchema, text)
	})
	t.Run("chat json_object", func(t *testing.T) {
		p := chatParams("Answer in JSON.", 50)
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
		resp, err := s.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		mustValidate(t, map[string]any{"type": "object"}, resp.Choices[0].Message.Content)
	})
	t.Run("responses text.format", func(t *testing.T) {
		resp, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(200),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Describe a person.")},
			Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{
				Name: "person", Schema: personSchema, Strict: openai.Bool(true)}}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != "completed" || resp.Text.Format.Type != "json_schema" {
			t.Fatalf("response %s", resp.RawJSON())
		}
		mustValidate(t, personSchema, resp.OutputText())
	})
	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct{ path, body, param, has string }{
			{"/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"objekt"}}}}`,
				"response_format.json_schema.schema", "invalid JSON schema"},
			{"/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"file:///etc/passwd"}}}}`,
				"response_format.json_schema.schema", "outside the schema"},
			{"/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"}}`,
				"response_format.json_schema", "required"},
			{"/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"yaml"}}`,
				"response_format.type", "json_schema"},
			{"/v1/responses", `{"model":"` + testModel + `","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"string","pattern":"("}}}}`,
				"text.format.schema", "pattern"},
			// A schema the mocker finds no value for: it refuses, never
			// answers free text.
			{"/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"^[0-9]{3}$"}}}}`,
				"", "the worker refused"},
		} {
			code, body := s.post(tc.path, tc.body, nil)
			e := errorObject(t, body)
			msg, _ := e["message"].(string)
			param, _ := e["param"].(string)
			if code != 400 || param != tc.param || !strings.Contains(msg, tc.has) {
				t.Errorf("%s: %d %v, want 400 on %q naming %q", tc.body, code, e, tc.param, tc.has)
			}
		}
	})
}
