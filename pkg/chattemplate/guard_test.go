package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// TestUnboundedMacroRecursionIsARenderError: a macro that calls itself
// without end, or two that call each other, fail the rendering with
// ErrRender naming the bound. The engine has no recursion limit: without
// the bound, the rendering overflows the stack, a fatal error that kills the
// process (this test binary, or a frontend given such a template).
func TestUnboundedMacroRecursionIsARenderError(t *testing.T) {
	// Every shape ends at whatever the limit is; a lower one keeps the three
	// runaways short under the race detector (TestMacroCallsLimit checks
	// MaxMacroCalls itself).
	LowerMacroCallLimit(t, 1<<10)
	for _, src := range []string{
		`{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}`,
		`{%- macro a(x) -%}{{ b(x) }}{%- endmacro -%}{%- macro b(x) -%}{{ a(x ~ 'y') }}{%- endmacro -%}{{ a('') }}`,
		`{% macro m(n=1) %}{% call m() %}x{% endcall %}{% endmacro %}{{ m() }}`,
	} {
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatalf("Parse(%q) = %v", src, err)
		}
		_, err = tmpl.Render(Input{})
		if !errors.Is(err, ErrRender) || !strings.Contains(err.Error(), fmt.Sprint(macroCallLimit)) {
			t.Fatalf("Render(%q) = %v; want ErrRender naming %d", src, err, macroCallLimit)
		}
	}
}

// TestMacroCallsLimit: a rendering may call its macros MaxMacroCalls times,
// not one more.
func TestMacroCallsLimit(t *testing.T) {
	if testing.Short() {
		// The count is the same code at any bound; the long form checks
		// that MaxMacroCalls nested calls fit the stack.
		LowerMacroCallLimit(t, 1<<10)
	}
	tmpl, err := Parse(`{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(depth) }}ok`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		calls int
		ok    bool
	}{{macroCallLimit, true}, {macroCallLimit + 1, false}} {
		out, err := tmpl.Render(Input{Extra: map[string]any{"depth": tc.calls - 1}})
		if tc.ok && (err != nil || out != "ok") {
			t.Fatalf("%d calls: %q, %v; want ok", tc.calls, out, err)
		}
		if !tc.ok && !errors.Is(err, ErrRender) {
			t.Fatalf("%d calls: %q, %v; want ErrRender", tc.calls, out, err)
		}
	}
}

// TestGuardKeepsOutput: the guard's parameter changes nothing a template
// outputs: whitespace control, defaults, keyword arguments, call blocks,
// bounded recursion (as tool-schema templates do) and raw blocks render as
// the engine renders the template without it.
func TestGuardKeepsOutput(t *testing.T) {
	for _, src := range []string{
		`{% macro m() %}a{% endmacro %}[{{ m() }}]`,
		"{%- macro m(x, y='d') -%}\n  {{ x }}-{{ y }}\n{%- endmacro -%}\n{{ m(1) }}|{{ m(2, y='k') }}|{{ m(3, 'p') }}",
		"{% macro m(\n    x,\n    y='zz'\n) %}{{ x }}{{ y | length }}{% endmacro %}{{ m('q') }}",
		`{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}in{% endcall %}`,
		`{%- macro ty(s) -%}{%- if s.type == 'array' -%}list[{{ ty(s.items) }}]{%- elif s.type == 'object' -%}dict{%- else -%}{{ s.type }}{%- endif -%}{%- endmacro -%}{{ ty(schema) }}`,
		"{% raw %}{% macro m() %}x{% endmacro %}{% endraw %} {% macro n() %}y{% endmacro %}{{ n() }}",
		`{# {% macro c() %} #}{% macro m(a,) %}{{ a }}{% endmacro %}{{ m(5) }}`,
	} {
		in := Input{Extra: map[string]any{"schema": map[string]any{"type": "array", "items": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}}}
		plain, err := jinja.Compile(src)
		if err != nil {
			t.Fatalf("the engine refuses %q: %v", src, err)
		}
		vars, err := in.values()
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.RenderValues(vars)
		if err != nil {
			t.Fatalf("engine Render(%q) = %v", src, err)
		}
		if _, err := jinja.Compile(guardMacros(src)); err != nil {
			t.Fatalf("the guarded %q does not compile: %v", guardMacros(src), err)
		}
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(in)
		if err != nil || got != want {
			t.Fatalf("Render(%q) = %q, %v; the engine renders %q", src, got, err, want)
		}
	}
}
