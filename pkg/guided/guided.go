// Package guided reads the structures a generation's output may be held to
// (guided decoding, OpenAI's response_format and text.format): it compiles
// a client's JSON Schema, refusing what is not a schema or reaches outside
// the document, validates JSON values against it, and makes the simplest
// value a schema accepts (what a mock engine answers).
//
// Schemas are compiled with github.com/santhosh-tekuri/jsonschema/v6
// (drafts 4 to 2020-12; 2020-12 when the schema names none). A $ref may
// point only inside the schema: nothing is loaded from files or the
// network.
package guided

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxSchemaBytes bounds a schema's JSON text: compiling is work the
// frontend does before any worker is chosen.
const MaxSchemaBytes = 256 << 10

// maxDepth bounds how deep Example follows a schema (nesting and $ref),
// so that a recursive schema ends.
const maxDepth = 32

var (
	// ErrInvalidSchema is a schema that is not valid JSON Schema, is too
	// large, or refers outside itself.
	ErrInvalidSchema = errors.New("invalid JSON schema")
	// ErrNoExample is a schema Example cannot make a value for (a pattern
	// it does not invert, contradictory bounds, false).
	ErrNoExample = errors.New("no value found for the JSON schema")
	// ErrInvalidValue is a value a schema does not accept.
	ErrInvalidValue = errors.New("the value does not match the JSON schema")
)

// schemaURL names the schema being compiled; nothing else can be loaded.
const schemaURL = "mem://switchyard/schema.json"

// noLoader refuses every reference outside the schema.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is outside the schema: only references within it are followed", url)
}

// Schema is a compiled JSON Schema.
type Schema struct {
	sch *jsonschema.Schema
	doc any
}

// Compile reads raw as a JSON Schema. It returns ErrInvalidSchema (wrapped,
// with what is wrong) for anything else.
func Compile(raw []byte) (*Schema, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidSchema, len(raw), MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalidSchema, err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, fmt.Errorf("%w: a schema is a JSON object (or true or false)", ErrInvalidSchema)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidSchema, oneLine(err))
	}
	return &Schema{sch: sch, doc: doc}, nil
}

// oneLine is an error's text on one line, without the schema's internal
// URL.
func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), schemaURL, "schema")
	return strings.Join(strings.Fields(s), " ")
}

// Validate checks the JSON text raw against the schema: ErrInvalidValue
// (wrapped, with the first reasons) when it does not match or is not JSON.
func (s *Schema) Validate(raw []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%w: not JSON: %v", ErrInvalidValue, err)
	}
	if err := s.sch.Validate(v); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidValue, oneLine(err))
	}
	return nil
}

// Example returns the JSON text of a simple value the schema accepts: the
// first of a const, an enum or a list of alternatives, the smallest number
// and shortest string within the bounds, objects with every property (and
// every required one), arrays of their least number of items. The value is
// validated; ErrNoExample when it does not match.
func (s *Schema) Example() ([]byte, error) {
	g := &gen{root: s.doc}
	b, err := json.Marshal(g.value(s.doc, 0))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoExample, err)
	}
	if err := s.Validate(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoExample, err)
	}
	return b, nil
}

// gen makes example values of the schema root.
type gen struct {
	root any
}

func (g *gen) value(node any, depth int) any {
	sch, ok := node.(map[string]any)
	if !ok || depth > maxDepth {
		return nil // true, false or too deep: null, validated after
	}
	if ref, ok := sch["$ref"].(string); ok {
		if target, ok := g.resolve(ref); ok {
			return g.value(target, depth+1)
		}
	}
	if c, ok := sch["const"]; ok {
		return c
	}
	if e, ok := sch["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := sch[k].([]any); ok && len(alts) > 0 {
			return g.value(alts[0], depth+1)
		}
	}
	if all, ok := sch["allOf"].([]any); ok && len(all) > 0 {
		return g.value(merge(sch, all), depth+1)
	}
	switch typeOf(sch) {
	case "null":
		return nil
	case "boolean":
		return true
	case "integer":
		return number(sch, true)
	case "number":
		return number(sch, false)
	case "string":
		return str(sch)
	case "array":
		return g.array(sch, depth)
	}
	return g.object(sch, depth)
}

// resolve follows a reference within the schema: "#" or a JSON pointer
// after it ("#/$defs/x").
func (g *gen) resolve(ref string) (any, bool) {
	ptr, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, false
	}
	node := g.root
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return node, true
}

// merge folds allOf's schemas into one: properties and required add up,
// other keywords are the first one's that sets them.
func merge(sch map[string]any, all []any) map[string]any {
	out := map[string]any{}
	props := map[string]any{}
	var required []any
	for _, part := range append([]any{sch}, all...) {
		m, ok := part.(map[string]any)
		if !ok {
			continue
		}
		for k, v := range m {
			switch k {
			case "allOf":
			case "properties":
				if p, ok := v.(map[string]any); ok {
					for pk, pv := range p {
						if _, ok := props[pk]; !ok {
							props[pk] = pv
						}
					}
				}
			case "required":
				if r, ok := v.([]any); ok {
					required = append(required, r...)
				}
			default:
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
	}
	if len(props) > 0 {
		out["properties"] = props
	}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}

// typeOf is the schema's type: its own (the first of a list), or what its
// keywords imply.
func typeOf(sch map[string]any) string {
	switch t := sch["type"].(type) {
	case string:
		return t
	case []any:
		for _, v := range t {
			if s, ok := v.(string); ok {
				return s
			}
		}
	}
	for _, k := range []string{"items", "prefixItems", "minItems", "maxItems", "contains"} {
		if _, ok := sch[k]; ok {
			return "array"
		}
	}
	for _, k := range []string{"minLength", "maxLength", "pattern", "format"} {
		if _, ok := sch[k]; ok {
			return "string"
		}
	}
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} {
		if _, ok := sch[k]; ok {
			return "number"
		}
	}
	return "object"
}

func num(sch map[string]any, k string) (float64, bool) {
	v, ok := sch[k].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := v.Float64()
	return f, err == nil
}

// number is the least number within the bounds (1 when nothing bounds it
// from below), a multiple of multipleOf when set.
func number(sch map[string]any, integer bool) any {
	v, lowSet := 1.0, false
	if m, ok := num(sch, "minimum"); ok {
		v, lowSet = m, true
	}
	if m, ok := num(sch, "exclusiveMinimum"); ok && (!lowSet || m >= v) {
		v, lowSet = m+1, true
		if !integer {
			v = m + 0.5
		}
	} else if b, ok := sch["exclusiveMinimum"].(bool); ok && b && lowSet {
		v++ // draft 4's form
	}
	if m, ok := num(sch, "maximum"); ok && !lowSet && m < v {
		v = m
	}
	if m, ok := num(sch, "exclusiveMaximum"); ok && !lowSet && m <= v {
		v = m - 1
	}
	if step, ok := num(sch, "multipleOf"); ok && step > 0 {
		v = math.Ceil(v/step) * step
	}
	if integer {
		v = math.Ceil(v)
	}
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return int64(v)
	}
	return v
}

// formats are an example of each string format Example knows.
var formats = map[string]string{
	"date-time": "2025-01-01T00:00:00Z", "date": "2025-01-01", "time": "00:00:00Z", "duration": "P1D",
	"email": "switchyard@example.com", "idn-email": "switchyard@example.com", "hostname": "example.com", "idn-hostname": "example.com",
	"ipv4": "127.0.0.1", "ipv6": "::1", "uri": "https://example.com/", "uri-reference": "https://example.com/", "iri": "https://example.com/",
	"iri-reference": "https://example.com/", "url": "https://example.com/", "uuid": "00000000-0000-4000-8000-000000000000",
	"regex": ".*", "json-pointer": "/switchyard", "relative-json-pointer": "0", "uri-template": "https://example.com/{id}",
}

// str is the format's example or "switchyard", made as long as minLength
// asks and as short as maxLength allows.
func str(sch map[string]any) string {
	s := "switchyard"
	if f, ok := sch["format"].(string); ok && formats[f] != "" {
		s = formats[f]
	}
	if m, ok := num(sch, "maxLength"); ok && m >= 0 && float64(len([]rune(s))) > m {
		s = string([]rune(s)[:int(m)])
	}
	if m, ok := num(sch, "minLength"); ok && m > float64(len([]rune(s))) && m <= 1<<16 {
		s += strings.Repeat("x", int(m)-len([]rune(s)))
	}
	return s
}

// array has minItems items (the prefix's first), each its schema's value.
func (g *gen) array(sch map[string]any, depth int) []any {
	n := 0
	if m, ok := num(sch, "minItems"); ok && m > 0 && m <= 1<<12 {
		n = int(m)
	}
	prefix, _ := sch["prefixItems"].([]any)
	items, hasItems := sch["items"]
	if tuple, ok := items.([]any); ok { // draft 4 to 2019-09 tuples
		prefix, hasItems = tuple, false
		items = sch["additionalItems"]
	}
	out := []any{}
	for i := range n {
		switch {
		case i < len(prefix):
			out = append(out, g.value(prefix[i], depth+1))
		case hasItems:
			out = append(out, g.value(items, depth+1))
		default:
			out = append(out, "switchyard")
		}
	}
	return out
}

// object has every property the schema names, required ones included.
func (g *gen) object(sch map[string]any, depth int) map[string]any {
	props, _ := sch["properties"].(map[string]any)
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := map[string]any{}
	for _, k := range keys {
		out[k] = g.value(props[k], depth+1)
	}
	req, _ := sch["required"].([]any)
	for _, r := range req {
		k, ok := r.(string)
		if _, have := out[k]; !ok || have {
			continue
		}
		if extra, ok := sch["additionalProperties"].(map[string]any); ok {
			out[k] = g.value(extra, depth+1)
		} else {
			out[k] = "switchyard"
		}
	}
	return out
}
