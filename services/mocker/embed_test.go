package mocker

import (
	"math"
	"testing"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

func TestEmbedder(t *testing.T) {
	e := embedder{dims: 16}
	in := func(ids ...uint32) *workerv1.EmbedInput { return &workerv1.EmbedInput{TokenIds: ids} }
	dims := func(d uint32) *uint32 { return &d }
	for _, tc := range []struct {
		name   string
		req    *workerv1.EmbedRequest
		dims   int
		tokens uint32
		err    bool
	}{
		{"one input", &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{in(1, 2, 3)}}, 16, 3, false},
		{"shortened", &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{in(1, 2, 3), in(4)}, Dimensions: dims(4)}, 4, 4, false},
		{"all dimensions", &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{in(7)}, Dimensions: dims(16)}, 16, 1, false},
		{"more dimensions than the model's", &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{in(1)}, Dimensions: dims(17)}, 0, 0, true},
		{"zero dimensions", &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{in(1)}, Dimensions: dims(0)}, 0, 0, true},
		{"an empty input", &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{in(1), in()}}, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.handle(t.Context(), tc.req)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error: %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if len(resp.Embeddings) != len(tc.req.Inputs) || resp.PromptTokens != tc.tokens {
				t.Fatalf("%d embeddings, %d tokens", len(resp.Embeddings), resp.PromptTokens)
			}
			for _, v := range resp.Embeddings {
				var n float64
				for _, x := range v.Values {
					n += float64(x) * float64(x)
				}
				if len(v.Values) != tc.dims || math.Abs(math.Sqrt(n)-1) > 1e-5 {
					t.Fatalf("%d dimensions, norm %v", len(v.Values), math.Sqrt(n))
				}
			}
		})
	}
	// Equal inputs, equal vectors; inputs sharing tokens are closer than
	// unrelated ones.
	resp, err := e.handle(t.Context(), &workerv1.EmbedRequest{Inputs: []*workerv1.EmbedInput{in(1, 2, 3, 4), in(1, 2, 3, 4), in(1, 2, 3, 9), in(50, 60, 70, 80)}})
	if err != nil {
		t.Fatal(err)
	}
	cos := func(a, b []float32) float64 {
		var d float64
		for i := range a {
			d += float64(a[i]) * float64(b[i])
		}
		return d
	}
	v := resp.Embeddings
	if c := cos(v[0].Values, v[1].Values); math.Abs(c-1) > 1e-6 {
		t.Fatalf("equal inputs: cosine %v", c)
	}
	if near, far := cos(v[0].Values, v[2].Values), cos(v[0].Values, v[3].Values); near <= far {
		t.Fatalf("three shared tokens: cosine %v, none shared: %v", near, far)
	}
}
