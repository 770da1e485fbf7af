package frontend

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonStrings are the cases json.Marshal treats specially.
var jsonStrings = []string{
	"", "plain text", `quote " and backslash \`, "<script>&amp;</script>", "line\nfeed\r\ttab", "\b\f\x00\x01\x1f\x7f",
	"héllo wörld 漢字 🙂", "\xff\xfe invalid", "truncated \xe6\xbc", "line sep \u2028 para sep \u2029", "\u2027\u202a",
	"\xed\xa0\x80 surrogate", "end\\",
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range jsonStrings {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("appendJSONString(%q) = %s, json.Marshal = %s", s, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString([]byte("x"), s); string(got[1:]) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, json.Marshal = %s", s, got[1:], want)
		}
	})
}

// TestAppendTextChunk holds the direct encoding of text chunks to
// json.Marshal of the same chunk, field by field and byte by byte.
func TestAppendTextChunk(t *testing.T) {
	deltas := []textDelta{
		{role: "assistant", field: fieldContent},
		{field: fieldContent, text: "Hello"},
		{field: fieldContent, text: `<b>"quoted"</b> & more` + "\n\xff"},
		{field: fieldReasoning, text: "thinking \u2028 aloud"},
		{field: fieldReasoning},
		{role: "assistant"},
		{},
	}
	finishes := []string{"", "stop", "length", "tool_calls"}
	sinks := []*chatSink{
		{id: "chatcmpl-0123456789abcdef", model: "Qwen/Qwen3-0.6B", fingerprint: "fp_8bb77fbd83e9", created: 1796134553},
		{id: "chatcmpl-x", model: `odd "model" <name> & \`, fingerprint: "fp_switchyard", created: 0, index: 7},
		{id: "", model: "m\u2029", fingerprint: "", created: -1, index: 0},
	}
	for _, c := range sinks {
		for _, d := range deltas {
			for _, fin := range finishes {
				d.finish = fin
				want, err := json.Marshal(c.chunk(d.chatDelta()))
				if err != nil {
					t.Fatal(err)
				}
				if got := c.appendTextChunk([]byte("data: "), d); string(got) != "data: "+string(want) {
					t.Errorf("appendTextChunk(%+v) =\n%s\njson.Marshal =\n%s", d, got[6:], want)
				}
			}
		}
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newID()
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" || seen[id] {
			t.Fatalf("newID() = %q: want 32 new lower-case hex digits", id)
		}
		seen[id] = true
	}
}
