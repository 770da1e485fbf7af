package mocker

import (
	"context"
	"fmt"
	"math"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// embedder makes up embeddings of dims dimensions: an input's vector is the
// mean of its tokens' vectors (each a deterministic pseudo-random unit
// vector of the token id), scaled to unit length. Equal inputs get equal
// vectors and inputs sharing tokens point closer together than unrelated
// ones, so that similarity searches over them behave like a real model's,
// if coarsely. A request's dimensions take the first components, scaled to
// unit length again (as Matryoshka-trained models shorten theirs).
type embedder struct {
	dims int
}

// handle answers one embed request.
func (e embedder) handle(_ context.Context, req *workerv1.EmbedRequest) (*workerv1.EmbedResponse, error) {
	dims := e.dims
	if req.Dimensions != nil {
		d := int(req.GetDimensions())
		if d < 1 || d > e.dims {
			return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument,
				Message: fmt.Sprintf("dimensions must be between 1 and %d (the model's)", e.dims)}
		}
		dims = d
	}
	resp := &workerv1.EmbedResponse{Embeddings: make([]*workerv1.Embedding, len(req.Inputs))}
	sum := make([]float64, e.dims)
	for i, in := range req.Inputs {
		if len(in.TokenIds) == 0 {
			return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("input %d is empty", i)}
		}
		clear(sum)
		for _, t := range in.TokenIds {
			addTokenVector(sum, t)
		}
		resp.Embeddings[i] = &workerv1.Embedding{Values: unit(sum[:dims])}
		resp.PromptTokens += uint32(len(in.TokenIds))
	}
	return resp, nil
}

// addTokenVector adds token t's pseudo-random vector (components uniform in
// [-1, 1), from a splitmix64 sequence seeded by t) to sum.
func addTokenVector(sum []float64, t uint32) {
	x := uint64(t)*0x9e3779b97f4a7c15 + 1
	for i := range sum {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		sum[i] += float64(z>>11)/float64(1<<52) - 1
	}
}

// unit returns v scaled to unit length, as float32.
func unit(v []float64) []float32 {
	var n float64
	for _, x := range v {
		n += x * x
	}
	n = math.Sqrt(n)
	out := make([]float32, len(v))
	if n == 0 {
		return out
	}
	for i, x := range v {
		out[i] = float32(x / n)
	}
	return out
}
