package chattemplate

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/ardanlabs/jinja"
)

// MaxMacroCalls bounds the macro calls of one rendering. The engine has no
// recursion limit, and a macro that calls itself without end (a broken or
// hostile template in a worker's tokenizer_config.json) overflows the Go
// stack: a fatal error no recover catches, which would take the frontend
// down with every request it serves. Real templates call their macros a
// few times per message or tool property; 65,536 nested calls take about
// 0.1 s and a fraction of the stack.
const MaxMacroCalls = 1 << 16

// macroCallLimit is the bound macroGuard applies: MaxMacroCalls, lowered
// only by tests that need a runaway recursion to end sooner.
var macroCallLimit = MaxMacroCalls

// guardName is the template variable whose call counts macro calls; no
// template uses it.
const guardName = "__switchyard_macro_guard"

// macroTag is a {% macro name(params) %} tag, with its whitespace control.
var macroTag = regexp.MustCompile(`(?s)(\{%[-+]?\s*macro\s+[A-Za-z_][A-Za-z0-9_]*\s*\()(.*?)(\)\s*[-+]?%\})`)

// rawBlock is a {% raw %}...{% endraw %} block, whose text is output as it
// stands.
var rawBlock = regexp.MustCompile(`(?s)\{%[-+]?\s*raw\s*[-+]?%\}.*?\{%[-+]?\s*endraw\s*[-+]?%\}`)

// guardMacros gives every macro of source one more parameter, whose
// default (evaluated at each call that does not pass it, which is every
// call) calls the guard. The parameter changes nothing a macro outputs.
// Text inside raw blocks is left as it is.
func guardMacros(source string) string {
	var b strings.Builder
	last := 0
	for _, raw := range rawBlock.FindAllStringIndex(source, -1) {
		b.WriteString(guardSpan(source[last:raw[0]]))
		b.WriteString(source[raw[0]:raw[1]])
		last = raw[1]
	}
	b.WriteString(guardSpan(source[last:]))
	return b.String()
}

func guardSpan(s string) string {
	return macroTag.ReplaceAllStringFunc(s, func(tag string) string {
		m := macroTag.FindStringSubmatch(tag)
		params := strings.TrimRight(m[2], " \t\r\n")
		if params != "" && !strings.HasSuffix(params, ",") {
			params += ", "
		}
		return m[1] + params + guardName + "=" + guardName + "()" + m[3]
	})
}

// macroGuard is the guard of one rendering: it fails the call past
// MaxMacroCalls.
func macroGuard() jinja.Value {
	calls := 0
	return jinja.NewCallable(guardName, func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		calls++
		if calls > macroCallLimit {
			return jinja.Undefined(), fmt.Errorf("the template called its macros more than %d times (a macro that calls itself without end?)", macroCallLimit)
		}
		return jinja.None(), nil
	})
}
