package frontendbench

import "testing"

func TestGenerated(t *testing.T) {
	for _, c := range []struct {
		chunk string
		want  bool
	}{
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, false},
		{`{"choices":[{"index":0,"delta":{"content":"A"}}]}`, true},
		{`{"choices":[{"index":0,"delta":{"reasoning_content":" short"}}]}`, true},
		{`{"choices":[{"index":0,"delta":{"reasoning_content":""}}]}`, false},
		{`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`, false},
		{`{"choices":[],"usage":{"prompt_tokens":20}}`, false},
	} {
		if got := generated([]byte(c.chunk)); got != c.want {
			t.Errorf("generated(%s) = %v, want %v", c.chunk, got, c.want)
		}
	}
}
