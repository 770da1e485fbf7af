package frontend_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

type embeddingAnswer struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// vectors reads the answer's embeddings, from numbers or base64.
func (a embeddingAnswer) vectors(t *testing.T) [][]float32 {
	t.Helper()
	out := make([][]float32, len(a.Data))
	for i, d := range a.Data {
		if d.Index != i || d.Object != "embedding" {
			t.Fatalf("data[%d]: index %d, object %q", i, d.Index, d.Object)
		}
		var s string
		if json.Unmarshal(d.Embedding, &s) == nil {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(b)%4 != 0 {
				t.Fatalf("data[%d]: base64 %q: %v", i, s, err)
			}
			for j := 0; j < len(b); j += 4 {
				out[i] = append(out[i], math.Float32frombits(binary.LittleEndian.Uint32(b[j:])))
			}
			continue
		}
		if err := json.Unmarshal(d.Embedding, &out[i]); err != nil {
			t.Fatalf("data[%d]: %v", i, err)
		}
	}
	return out
}

func norm(v []float32) float64 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	return math.Sqrt(n)
}

func equalVectors(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEmbeddings sends /v1/embeddings requests to two mockers serving
// embeddings of the test model, and one serving another model for
// generation only: every input form (a string, strings, token ids, arrays
// of token ids), float and base64 encodings of the same vectors, shortened
// dimensions, equal inputs getting equal unit vectors and different ones
// different vectors, usage counting every input's tokens, the requests
// spread over both workers, and a clear 4xx for each bad request.
func TestEmbeddings(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	a, b := s.addMocker(0), s.addMocker(0)
	s.startMocker([]transport.Plane{s.opts.plane}, 0, false, "--model-name", "gen-only", "--embedding-dimensions", "0")
	s.waitInstances(3)
	post := func(body string) (int, embeddingAnswer, string) {
		t.Helper()
		resp, raw := s.rawPost("/v1/embeddings", body, nil)
		var ans embeddingAnswer
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(raw, &ans); err != nil {
				t.Fatalf("answer %q: %v", raw, err)
			}
		}
		return resp.StatusCode, ans, string(raw)
	}
	model := fmt.Sprintf("%q", testModel)
	ok := []struct {
		name, input, extra string
		n, dims            int
	}{
		{"string", `"The quick brown fox"`, ``, 1, 1024},
		{"strings", `["The quick brown fox","jumps over","The quick brown fox"]`, ``, 3, 1024},
		{"token ids", `[785,3974,13876]`, ``, 1, 1024},
		{"arrays of token ids", `[[785,3974,13876],[38835,34208]]`, ``, 2, 1024},
		{"base64", `["The quick brown fox","jumps over","The quick brown fox"]`, `,"encoding_format":"base64"`, 3, 1024},
		{"dimensions", `"The quick brown fox"`, `,"dimensions":64,"encoding_format":"float"`, 1, 64},
	}
	var strings3 [][]float32
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			code, ans, raw := post(`{"model":` + model + `,"input":` + tc.input + tc.extra + `}`)
			if code != 200 {
				t.Fatalf("status %d: %s", code, raw)
			}
			if ans.Object != "list" || ans.Model != testModel || ans.Usage.PromptTokens < tc.n || ans.Usage.TotalTokens != ans.Usage.PromptTokens {
				t.Fatalf("answer %+v", ans)
			}
			vs := ans.vectors(t)
			if len(vs) != tc.n {
				t.Fatalf("%d embeddings, want %d", len(vs), tc.n)
			}
			for i, v := range vs {
				if len(v) != tc.dims || math.Abs(norm(v)-1) > 1e-3 {
					t.Fatalf("embedding %d: %d dimensions, norm %v; want %d, 1", i, len(v), norm(v), tc.dims)
				}
			}
			if tc.n == 3 {
				if !equalVectors(vs[0], vs[2]) || equalVectors(vs[0], vs[1]) {
					t.Fatal("equal inputs got different vectors, or different inputs equal ones")
				}
				if strings3 == nil {
					strings3 = vs
				} else {
					for i := range vs {
						if !equalVectors(vs[i], strings3[i]) {
							t.Fatalf("embedding %d differs between float and base64", i)
						}
					}
				}
			}
		})
	}
	bad := []struct {
		name, body string
		status     int
		param      string
	}{
		{"no input", `{"model":` + model + `}`, 400, "input"},
		{"empty string", `{"model":` + model + `,"input":""}`, 400, "input"},
		{"empty list", `{"model":` + model + `,"input":[]}`, 400, "input"},
		{"empty token list", `{"model":` + model + `,"input":[[1,2],[]]}`, 400, "input"},
		{"mixed list", `{"model":` + model + `,"input":["a",1]}`, 400, "input"},
		{"too many", `{"model":` + model + `,"input":[` + strings.TrimSuffix(strings.Repeat(`"a",`, 2049), ",") + `]}`, 400, "input"},
		{"token outside the vocabulary", `{"model":` + model + `,"input":[4000000000]}`, 400, "input"},
		{"bad encoding", `{"model":` + model + `,"input":"a","encoding_format":"hex"}`, 400, "encoding_format"},
		{"zero dimensions", `{"model":` + model + `,"input":"a","dimensions":0}`, 400, "dimensions"},
		{"too many dimensions", `{"model":` + model + `,"input":"a","dimensions":5000}`, 400, ""},
		{"unknown field", `{"model":` + model + `,"input":"a","pooling":"mean"}`, 400, "pooling"},
		{"no model", `{"input":"a"}`, 400, "model"},
		{"unknown model", `{"model":"nope","input":"a"}`, 404, "model"},
		{"a generation-only model", `{"model":"gen-only","input":"a"}`, 400, "model"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			code, _, raw := post(tc.body)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(raw), &e); err != nil || code != tc.status || e.Error.Message == "" {
				t.Fatalf("status %d, body %s; want %d with a message", code, raw, tc.status)
			}
			if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Fatalf("param %v, want %q: %s", e.Error.Param, tc.param, raw)
			}
		})
	}
	// The requests went to both embedding workers, none to the other.
	for _, m := range []*mockerHandle{a, b} {
		if n := s.metric("switchyard_frontend_worker_requests_total", fmt.Sprintf(`instance="%s"`, hexID(m.w.InstanceID()))); n == 0 {
			t.Errorf("worker %x served no embedding request", m.w.InstanceID())
		}
	}
}
