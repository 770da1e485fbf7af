package guided

import (
	"errors"
	"strings"
	"testing"
)

func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct{ name, schema, has string }{
		{"not JSON", `{"type":`, "not JSON"},
		{"a string", `"object"`, "a schema is a JSON object"},
		{"unknown type", `{"type":"objekt"}`, "/type"},
		{"type a number", `{"type":3}`, "type"},
		{"properties a list", `{"type":"object","properties":[]}`, "properties"},
		{"bad pattern", `{"type":"string","pattern":"("}`, "pattern"},
		{"required not a list", `{"type":"object","required":"a"}`, "required"},
		{"a file reference", `{"$ref":"file:///etc/passwd"}`, "outside the schema"},
		{"a web reference", `{"$ref":"https://example.com/s.json"}`, "outside the schema"},
		{"a missing definition", `{"$ref":"#/$defs/nope"}`, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile([]byte(tc.schema))
			if !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), tc.has) {
				t.Fatalf("Compile(%s) = %v, want ErrInvalidSchema naming %q", tc.schema, err, tc.has)
			}
			if strings.Contains(err.Error(), schemaURL) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q names the internal URL or spans lines", err)
			}
		})
	}
}

func TestMaxSchemaBytes(t *testing.T) {
	pad := func(n int) []byte {
		head, tail := `{"description":"`, `"}`
		return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
	}
	if _, err := Compile(pad(MaxSchemaBytes)); err != nil {
		t.Fatalf("a schema of MaxSchemaBytes: %v", err)
	}
	if _, err := Compile(pad(MaxSchemaBytes + 1)); !errors.Is(err, ErrInvalidSchema) {
		t.Fatalf("a schema past MaxSchemaBytes: %v", err)
	}
}

func TestExample(t *testing.T) {
	for _, tc := range []struct{ name, schema, want string }{
		{"true", `true`, `null`},
		{"empty", `{}`, `{}`},
		{"object", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`,
			`{"age":1,"name":"switchyard"}`},
		{"enum and const", `{"type":"object","properties":{"a":{"enum":["x","y"]},"b":{"const":3}}}`, `{"a":"x","b":3}`},
		{"nullable", `{"type":["null","string"]}`, `null`},
		{"bounds", `{"type":"object","properties":{"i":{"type":"integer","minimum":5},"x":{"type":"number","exclusiveMinimum":2},"m":{"type":"integer","minimum":7,"multipleOf":5},"neg":{"type":"integer","maximum":-3}}}`,
			`{"i":5,"m":10,"neg":-3,"x":2.5}`},
		{"strings", `{"type":"object","properties":{"s":{"type":"string","minLength":12},"t":{"type":"string","maxLength":3},"d":{"type":"string","format":"date-time"}}}`,
			`{"d":"2025-01-01T00:00:00Z","s":"switchyardxx","t":"swi"}`},
		{"arrays", `{"type":"object","properties":{"l":{"type":"array","items":{"type":"boolean"},"minItems":2},"e":{"type":"array"}}}`,
			`{"e":[],"l":[true,true]}`},
		{"refs", `{"$defs":{"p":{"type":"object","properties":{"n":{"type":"string"}},"required":["n"]}},"type":"object","properties":{"who":{"$ref":"#/$defs/p"}},"required":["who"]}`,
			`{"who":{"n":"switchyard"}}`},
		{"anyOf", `{"anyOf":[{"type":"integer"},{"type":"string"}]}`, `1`},
		{"allOf", `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"properties":{"b":{"type":"boolean"}},"required":["b"]}]}`,
			`{"a":"switchyard","b":true}`},
		{"recursive", `{"$defs":{"node":{"type":"object","properties":{"next":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/node"}]}}}},"$ref":"#/$defs/node"}`,
			`{"next":null}`},
		{"required without a property", `{"type":"object","required":["x"]}`, `{"x":"switchyard"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Compile([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Example()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("Example(%s) = %s, want %s", tc.schema, got, tc.want)
			}
		})
	}
}

func TestNoExample(t *testing.T) {
	for _, schema := range []string{`false`, `{"type":"string","pattern":"^[0-9]{3}$"}`, `{"type":"integer","minimum":5,"maximum":2}`} {
		s, err := Compile([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Example(); !errors.Is(err, ErrNoExample) {
			t.Fatalf("Example(%s) = %v, want ErrNoExample", schema, err)
		}
	}
}

func TestValidate(t *testing.T) {
	s, err := Compile([]byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value string
		ok    bool
	}{{`{"n":1}`, true}, {`{"n":"1"}`, false}, {`{}`, false}, {`{"n":`, false}, {`[]`, false}} {
		if err := s.Validate([]byte(tc.value)); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidValue)) {
			t.Errorf("Validate(%s) = %v, want ok %v", tc.value, err, tc.ok)
		}
	}
}

// FuzzCompile checks that any input either compiles or is ErrInvalidSchema,
// and that what compiles either gives an example that validates or is
// ErrNoExample.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{`{}`, `true`, `{"type":"object","properties":{"a":{"type":"string","minLength":3}},"required":["a"]}`,
		`{"$defs":{"n":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/n"}]}},"$ref":"#/$defs/n"}`, `{"type":"array","items":{"type":"integer","minimum":-4},"minItems":3}`,
		`{"allOf":[{"required":["x"]},{"properties":{"x":{"enum":[1,2]}}}]}`, `{"type":"number","exclusiveMinimum":0.5,"multipleOf":0.25}`,
		`{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","minimum":3,"exclusiveMinimum":true}`, `{"$ref":"file:///etc/passwd"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := Compile(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("Compile(%q) = %v, not ErrInvalidSchema", raw, err)
			}
			return
		}
		ex, err := s.Example()
		if err != nil {
			if !errors.Is(err, ErrNoExample) {
				t.Fatalf("Example(%q) = %v, not ErrNoExample", raw, err)
			}
			return
		}
		if err := s.Validate(ex); err != nil {
			t.Fatalf("Example(%q) = %s, which does not validate: %v", raw, ex, err)
		}
	})
}
