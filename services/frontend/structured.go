package frontend

import (
	"bytes"
	"encoding/json"
	"errors"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/guided"
)

// Structured outputs: chat's response_format and the Responses API's
// text.format ask for JSON (json_object) or JSON valid against a schema
// (json_schema). The frontend checks the schema compiles (a 400 naming
// what is wrong otherwise) and passes the format to the worker in the
// generate request's guided_decoding; a worker that cannot constrain its
// output refuses the request rather than answer free text.

// formatJSON is a response format as either API sends it: chat nests the
// schema under json_schema, the Responses API puts its members in the
// format itself.
type formatJSON struct {
	Type       string          `json:"type"`
	JSONSchema *schemaFormat   `json:"json_schema"`
	Name       string          `json:"name"`
	Schema     json.RawMessage `json:"schema"`
	Strict     *bool           `json:"strict"`
}

type schemaFormat struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"`
}

// parseFormat reads a response format; param names its field
// (response_format or text.format) and nested says whether the schema sits
// under json_schema (chat) or in the format (Responses). Text, or no
// format, is nil.
func parseFormat(raw json.RawMessage, param string, nested bool) (*workerv1.GuidedDecoding, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var f formatJSON
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, invalid(param, `%s must be an object such as {"type": "json_schema", ...}`, param)
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &workerv1.GuidedDecoding{Format: &workerv1.GuidedDecoding_JsonObject{JsonObject: true}}, nil
	case "json_schema":
	default:
		return nil, invalid(param+".type", "%s.type must be text, json_object or json_schema, got %q", param, f.Type)
	}
	name, schema, sparam := f.Name, f.Schema, param+".schema"
	if nested {
		if f.JSONSchema == nil {
			return nil, invalid(param+".json_schema", "%s.json_schema is required with type json_schema", param)
		}
		name, schema, sparam = f.JSONSchema.Name, f.JSONSchema.Schema, param+".json_schema.schema"
	}
	schema = bytes.TrimSpace(schema)
	if len(schema) == 0 || bytes.Equal(schema, []byte("null")) {
		return nil, invalid(sparam, "%s is required with type json_schema", sparam)
	}
	if _, err := guided.Compile(schema); err != nil {
		if errors.Is(err, guided.ErrInvalidSchema) {
			return nil, invalid(sparam, "%s: %v", sparam, err)
		}
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, schema); err != nil {
		return nil, invalid(sparam, "%s is not JSON", sparam)
	}
	return &workerv1.GuidedDecoding{Format: &workerv1.GuidedDecoding_JsonSchema{JsonSchema: compact.String()}, Name: name}, nil
}
