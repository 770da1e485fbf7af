package openai

import (
	"encoding/json"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FuzzContentText: the fast path of ContentText gives what json.Unmarshal
// gives, for any string content.
func FuzzContentText(f *testing.F) {
	for _, s := range []string{"", "plain", "with \"quotes\"", "back\\slash", "\x00\x1f", "日本", "\xff\xfe", "</think>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		escaped, err := json.Marshal(s)
		if err != nil {
			t.Skip()
		}
		// As clients send it too: unescaped where JSON allows it.
		raws := [][]byte{escaped, []byte(`"` + s + `"`)}
		for _, raw := range raws {
			var want string
			if err := json.Unmarshal(raw, &want); err != nil {
				continue // not a JSON string: Decode refuses the body first
			}
			got, err := ContentText(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("ContentText(%s) = %q, want %q", raw, got, want)
			}
		}
	})
}
