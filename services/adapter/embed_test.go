package adapter

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestEmbedThroughEngine runs the embed handler against a stand-in of an
// engine's /v1/embeddings (vLLM's shape, token id inputs): the inputs go as
// arrays of ids with dimensions, the answer's vectors come back in input
// order (placed by index, however the engine orders them), usage from the
// engine; a 400 is the client's, a wrong count or index the engine's
// failure.
func TestEmbedThroughEngine(t *testing.T) {
	var answer func(req embeddingsRequest) (int, any)
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req embeddingsRequest
		if r.URL.Path != "/v1/embeddings" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != "m" || req.EncodingFormat != "float" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		code, body := answer(req)
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer eng.Close()
	h := embed(eng.Client(), eng.URL+"/v1", "m")
	two := uint32(2)
	req := &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{{TokenIds: []uint32{1, 2}}, {TokenIds: []uint32{3}}}, Dimensions: &two}
	answer = func(r embeddingsRequest) (int, any) {
		if len(r.Input) != 2 || len(r.Input[0]) != 2 || r.Dimensions == nil || *r.Dimensions != 2 {
			return 400, map[string]any{"object": "error", "message": "unexpected", "code": 400}
		}
		return 200, map[string]any{"object": "list", "data": []any{
			map[string]any{"index": 1, "embedding": []float32{0, 1}},
			map[string]any{"index": 0, "embedding": []float32{1, 0}},
		}, "usage": map[string]any{"prompt_tokens": 3}}
	}
	resp, err := h(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Embeddings) != 2 || resp.Embeddings[0].Values[0] != 1 || resp.Embeddings[1].Values[1] != 1 || resp.PromptTokens != 3 {
		t.Fatalf("answer %v", resp)
	}
	for _, tc := range []struct {
		name   string
		code   int
		body   any
		client bool // the engine refused the request: invalid_argument
	}{
		{"refused", 400, map[string]any{"object": "error", "message": "too long", "code": 400}, true},
		{"one short", 200, map[string]any{"data": []any{map[string]any{"index": 0, "embedding": []float32{1}}}}, false},
		{"index repeated", 200, map[string]any{"data": []any{map[string]any{"index": 0, "embedding": []float32{1}}, map[string]any{"index": 0, "embedding": []float32{1}}}}, false},
		{"index out of range", 200, map[string]any{"data": []any{map[string]any{"index": 0, "embedding": []float32{1}}, map[string]any{"index": 5, "embedding": []float32{1}}}}, false},
		{"error object", 200, map[string]any{"object": "error", "message": "boom"}, false},
		{"engine down", 500, "internal", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer = func(embeddingsRequest) (int, any) { return tc.code, tc.body }
			_, err := h(t.Context(), req)
			var he *transport.HandlerError
			if err == nil || (errors.As(err, &he) && he.Code == transport.CodeInvalidArgument) != tc.client {
				t.Fatalf("err %v, want the client's: %v", err, tc.client)
			}
		})
	}
}

// FuzzDecodeEmbeddings feeds the engine answer's decoder anything: it never
// panics, and an answer it takes has one embedding per input.
func FuzzDecodeEmbeddings(f *testing.F) {
	f.Add([]byte(`{"data":[{"index":0,"embedding":[1,2]},{"index":1,"embedding":[3]}],"usage":{"prompt_tokens":3}}`))
	f.Add([]byte(`{"data":[{"index":1,"embedding":[1]},{"index":1,"embedding":[1]}]}`))
	f.Add([]byte(`{"object":"error","message":"x"}`))
	f.Add([]byte(`{"data":[{"index":-1}]}`))
	req := &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{{TokenIds: []uint32{1}}, {TokenIds: []uint32{2}}}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := decodeEmbeddings(raw, req)
		if err != nil {
			return
		}
		if len(out.Embeddings) != len(req.Inputs) {
			t.Fatalf("%d embeddings for %d inputs", len(out.Embeddings), len(req.Inputs))
		}
		for i, e := range out.Embeddings {
			if e == nil {
				t.Fatalf("embedding %d missing", i)
			}
		}
	})
}
