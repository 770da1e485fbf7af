package toolcall

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// streamedArgs feeds text in pieces of step bytes in streaming mode and
// puts the calls back together. It checks that the pieces come in order
// (CallBegin, ArgumentsDelta..., CallEnd) and returns how many argument
// fragments there were.
func streamedArgs(t testing.TB, text string, step int) (string, []Call, int) {
	p, err := New(Qwen3)
	if err != nil {
		t.Fatal(err)
	}
	p.StreamArguments()
	var b strings.Builder
	var calls []Call
	open, frags := false, 0
	collect := func(evs []Event) {
		for _, e := range evs {
			switch e.Kind {
			case CallBegin:
				if open || e.Name == "" {
					t.Fatalf("CallBegin %q while a call is open", e.Name)
				}
				open = true
				calls = append(calls, Call{Name: e.Name})
			case ArgumentsDelta:
				if !open || e.Arguments == "" {
					t.Fatalf("ArgumentsDelta %q outside a call", e.Arguments)
				}
				frags++
				calls[len(calls)-1].Arguments += e.Arguments
			case CallEnd:
				if !open {
					t.Fatal("CallEnd without CallBegin")
				}
				open = false
			default:
				if open {
					t.Fatalf("content %q %v inside an open call", e.Text, e.Call)
				}
				if e.Call != nil {
					calls = append(calls, *e.Call)
				} else {
					b.WriteString(e.Text)
				}
			}
		}
	}
	for i := 0; i < len(text); i += step {
		collect(p.Add(text[i:min(i+step, len(text))]))
	}
	collect(p.Flush())
	if open {
		t.Fatal("a call is still open after Flush")
	}
	if p.Calls() != len(calls) {
		t.Fatalf("Calls() = %d, returned %d", p.Calls(), len(calls))
	}
	return b.String(), calls, frags
}

// TestStreamArguments: well-formed calls stream their arguments in
// fragments that join to what Parse returns; other forms come whole.
func TestStreamArguments(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		streams    bool // the arguments come in fragments
	}{
		{"qwen3 call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>", true},
		{"content around calls", "Let me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"}\\\" {\"}}\n</tool_call>\n<tool_call>{\"name\":\"b\",\"parameters\":{}}</tool_call>\nDone.", true},
		{"arguments before the name", `<tool_call>{"arguments": {"q": 1}, "name": "f"}</tool_call>`, false},
		{"arguments as a string", `<tool_call>{"name": "f", "arguments": "{\"q\": \"x\"}"}</tool_call>`, false},
		{"no arguments", `<tool_call>{"name": "f"}</tool_call>`, false},
		{"malformed header is content", `<tool_call>{"name": 3, "arguments": {}}</tool_call>`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, calls, err := Parse(Qwen3, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			for _, step := range []int{1, 2, 5, len(tc.text)} {
				got, gotCalls, frags := streamedArgs(t, tc.text, step)
				if got != content || !cmp.Equal(gotCalls, calls) {
					t.Fatalf("step %d: %q %v, Parse: %q %v", step, got, gotCalls, content, calls)
				}
				if step == 1 && tc.streams && frags <= len(calls) {
					t.Fatalf("byte by byte, %d calls came in %d fragments: not streamed", len(calls), frags)
				}
				if !tc.streams && frags > 0 {
					t.Fatalf("%d fragments of a call that is not streamable", frags)
				}
			}
		})
	}
}

// TestStreamArgumentsBroken: a begun call whose arguments break ends with
// what was sent; it is never left open.
func TestStreamArgumentsBroken(t *testing.T) {
	for _, text := range []string{
		"<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1",                    // the text ends
		"<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": }}</tool_call> after", // invalid JSON
	} {
		_, calls, _ := streamedArgs(t, text, 1)
		if len(calls) != 1 || calls[0].Name != "f" || !strings.HasPrefix(calls[0].Arguments, `{"x":`) {
			t.Fatalf("%q: calls %v", text, calls)
		}
	}
}

// TestStreamArgumentsRandom: random well-formed calls with random
// whitespace and content, streamed in random pieces, give what Parse gives.
func TestStreamArgumentsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 17))
	ws := []string{"", " ", "\n", "  ", "\t"}
	w := func() string { return ws[r.IntN(len(ws))] }
	for range 500 {
		var b strings.Builder
		for range 1 + r.IntN(3) {
			b.WriteString([]string{"", "Sure.", "text <b>", "a\n\n"}[r.IntN(4)])
			key := []string{`"arguments"`, `"parameters"`}[r.IntN(2)]
			fmt.Fprintf(&b, "<tool_call>%s{%s\"name\"%s:%s\"fn_%d\"%s,%s%s%s:%s{%s\"a\"%s:%s[1,%s{\"s\":\"x} \\\" y\"}]%s,\"b\":%snull}%s}%s</tool_call>",
				w(), w(), w(), w(), r.IntN(9), w(), w(), key, w(), w(), w(), w(), w(), w(), w(), w(), w(), w())
		}
		text := b.String()
		content, calls, _ := Parse(Qwen3, text)
		if len(calls) == 0 {
			t.Fatalf("Parse found no call in %q", text)
		}
		got, gotCalls, _ := streamedArgs(t, text, 1+r.IntN(8))
		if got != content || !cmp.Equal(gotCalls, calls) {
			t.Fatalf("%q: streamed %q %v, Parse %q %v", text, got, gotCalls, content, calls)
		}
	}
}

// FuzzStreamArguments: any text, in any split, streams to the same result
// as in one piece, with the pieces in order.
func FuzzStreamArguments(f *testing.F) {
	f.Add("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>", uint8(3))
	f.Add("hi <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"</tool_\"}}</tool_call> bye", uint8(1))
	f.Add("<tool_call>{\"name\": \"f\", \"arguments\": {}}}}</tool_call><tool_call>", uint8(2))
	f.Fuzz(func(t *testing.T, text string, step uint8) {
		whole, wholeCalls, _ := streamedArgs(t, text, len(text)+1)
		got, gotCalls, _ := streamedArgs(t, text, int(step%16)+1)
		if got != whole || !cmp.Equal(gotCalls, wholeCalls) {
			t.Fatalf("split by %d: %q %v, whole: %q %v", step%16+1, got, gotCalls, whole, wholeCalls)
		}
	})
}
