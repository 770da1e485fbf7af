package frontend

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// OpenAI's /v1/embeddings. A request's inputs are tokenized here and sent,
// in one EmbedRequest, to one worker whose model card lists the embed task,
// the one with the fewest of this frontend's requests in flight (ties go
// round-robin): embeddings reuse no KV cache, so there is nothing for the
// router to weigh. A worker that cannot be reached or fails on the way is
// replaced by the next, up to --migration-limit times.

// maxEmbeddingInputs is OpenAI's limit on the inputs of one request.
const maxEmbeddingInputs = 2048

// embeddingRequest is the body of POST /v1/embeddings.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int64          `json:"dimensions"`
	User           string          `json:"user"`
}

var embeddingPolicy = fieldPolicy{
	supported: fieldSet(append([]string{"model", "input", "encoding_format", "dimensions"}, bookkeeping...)...),
}

// embedParams is a validated embedding request: its inputs as text or as
// token ids (one of each per input).
type embedParams struct {
	model      string
	texts      []string
	ids        [][]uint32
	base64     bool
	dimensions *uint32
}

// decodeEmbeddings decodes and validates an embedding request. input is a
// string, an array of strings, an array of token ids or an array of arrays
// of token ids, none of them empty.
func decodeEmbeddings(body []byte) (embedParams, error) {
	var r embeddingRequest
	if err := openai.Decode(body, &r); err != nil {
		return embedParams{}, err
	}
	if err := embeddingPolicy.check(body); err != nil {
		return embedParams{}, err
	}
	p := embedParams{model: r.Model}
	if r.Model == "" {
		return p, invalid("model", "model is required")
	}
	switch r.EncodingFormat {
	case "", "float":
	case "base64":
		p.base64 = true
	default:
		return p, invalid("encoding_format", `encoding_format must be "float" or "base64"`)
	}
	if r.Dimensions != nil {
		if *r.Dimensions < 1 || *r.Dimensions > math.MaxInt32 {
			return p, invalid("dimensions", "dimensions must be a positive integer")
		}
		d := uint32(*r.Dimensions)
		p.dimensions = &d
	}
	in := bytes.TrimSpace(r.Input)
	if len(in) == 0 || bytes.Equal(in, []byte("null")) {
		return p, invalid("input", "input is required")
	}
	// Each form is tried into values of its own: a failed Unmarshal may
	// have filled part of its target.
	var texts []string
	var batches [][]uint32
	if one, ok := decodeAs[string](in); ok {
		texts = []string{one}
	} else if list, ok := decodeAs[[]string](in); ok {
		texts = list
	} else if ids, ok := decodeAs[[]uint32](in); ok {
		batches = [][]uint32{ids}
	} else if lists, ok := decodeAs[[][]uint32](in); ok {
		batches = lists
	} else {
		return p, invalid("input", "input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	n := len(texts) + len(batches)
	if n == 0 {
		return p, invalid("input", "input must not be empty")
	}
	if n > maxEmbeddingInputs {
		return p, invalid("input", "input has %d items; at most %d are allowed", n, maxEmbeddingInputs)
	}
	for i, t := range texts {
		if t == "" {
			return p, invalid("input", "input %d is an empty string", i)
		}
	}
	for i, b := range batches {
		if len(b) == 0 {
			return p, invalid("input", "input %d has no tokens", i)
		}
	}
	p.texts, p.ids = texts, batches
	return p, nil
}

// decodeAs decodes b as a T, reporting whether it is one.
func decodeAs[T any](b []byte) (T, bool) {
	var v T
	if json.Unmarshal(b, &v) != nil {
		var zero T
		return zero, false
	}
	return v, true
}

// embedTarget is a worker that serves embeddings of a model.
type embedTarget struct {
	instanceID uint64
	transport  *commonv1.Transport
}

// embedRR breaks ties between equally loaded embedding workers.
var embedRR atomic.Uint64

// pickEmbedder returns the target with the fewest of this frontend's
// requests in flight, skipping excluded ones; ties go round-robin.
func (s *Service) pickEmbedder(targets []embedTarget, exclude map[uint64]bool) (embedTarget, bool) {
	var best []embedTarget
	least := math.MaxInt
	s.load.mu.Lock()
	for _, t := range targets {
		if exclude[t.instanceID] {
			continue
		}
		switch n := s.load.n[t.instanceID]; {
		case n < least:
			least, best = n, append(best[:0], t)
		case n == least:
			best = append(best, t)
		}
	}
	s.load.mu.Unlock()
	if len(best) == 0 {
		return embedTarget{}, false
	}
	return best[embedRR.Add(1)%uint64(len(best))], true
}

// embeddingJSON is one embedding of the answer: a list of numbers, or with
// encoding_format base64 the little-endian float32 values in base64.
type embeddingJSON struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingList struct {
	Object string          `json:"object"`
	Data   []embeddingJSON `json:"data"`
	Model  string          `json:"model"`
	Usage  struct {
		PromptTokens uint32 `json:"prompt_tokens"`
		TotalTokens  uint32 `json:"total_tokens"`
	} `json:"usage"`
}

func (s *Service) handleEmbeddings(w *recorder, r *http.Request) {
	body, err := s.readBody(r, w)
	if err != nil {
		writeError(w, err)
		return
	}
	p, err := decodeEmbeddings(body)
	if err != nil {
		writeError(w, err)
		return
	}
	w.model = p.model
	card, a, err := s.modelAssets(r.Context(), p.model)
	if err != nil {
		writeError(w, err)
		return
	}
	req := &workerv1.EmbedRequest{RequestId: "embd-" + newID(), Model: p.model, Dimensions: p.dimensions}
	total := 0
	add := func(i int, ids []uint32) error {
		if cl := card.GetContextLength(); cl > 0 && uint32(len(ids)) > cl {
			return &openai.ParamError{Param: "input", Code: "context_length_exceeded",
				Message: fmt.Sprintf("input %d is %d tokens; the model's context length is %d", i, len(ids), cl)}
		}
		total += len(ids)
		req.Inputs = append(req.Inputs, &workerv1.EmbedInput{TokenIds: ids})
		return nil
	}
	for i, t := range p.texts {
		if err := add(i, a.Encode(t)); err != nil {
			writeError(w, err)
			return
		}
	}
	for i, ids := range p.ids {
		err := a.inVocab("input", ids)
		if err == nil {
			err = add(i, ids)
		}
		if err != nil {
			writeError(w, err)
			return
		}
	}
	if err := s.admitTokens(r.Context(), total); err != nil {
		writeError(w, err)
		return
	}
	resp, err := s.embed(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	out := embeddingList{Object: "list", Data: make([]embeddingJSON, len(resp.Embeddings)), Model: p.model}
	for i, e := range resp.Embeddings {
		var v any = e.GetValues()
		if p.base64 {
			b := make([]byte, 0, 4*len(e.GetValues()))
			for _, f := range e.GetValues() {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
			}
			v = base64.StdEncoding.EncodeToString(b)
		} else if e.GetValues() == nil {
			v = []float32{}
		}
		out.Data[i] = embeddingJSON{Object: "embedding", Index: i, Embedding: v}
	}
	out.Usage.PromptTokens = uint32(total)
	out.Usage.TotalTokens = uint32(total)
	writeJSON(w, http.StatusOK, out)
}

// embed sends req to an embedding worker of its model and returns the
// answer, trying another worker when one cannot be reached or fails on the
// way (up to --migration-limit others).
func (s *Service) embed(ctx context.Context, req *workerv1.EmbedRequest) (*workerv1.EmbedResponse, error) {
	targets := s.catalog.embedders(req.Model)
	if len(targets) == 0 {
		if len(s.catalog.modelInstances(req.Model)) > 0 {
			return nil, &openai.ParamError{Param: "model", Code: "model_not_supported",
				Message: fmt.Sprintf("the model %q does not serve embeddings: its workers generate only", req.Model)}
		}
		return nil, fmt.Errorf("%w: no worker serves embeddings of %s", ErrNoInstance, req.Model)
	}
	payload, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	tried := map[uint64]bool{}
	for attempt := 0; ; attempt++ {
		t, ok := s.pickEmbedder(targets, tried)
		if !ok {
			return nil, fmt.Errorf("%w: no reachable worker serves embeddings of %s", ErrNoInstance, req.Model)
		}
		resp, err := s.embedOn(ctx, t, req, payload)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil || !migratable(err) || attempt >= s.cfg.MigrationLimit {
			return nil, err
		}
		s.log.Warn("embedding worker failed; trying another", "request_id", req.RequestId, "instance", fmt.Sprintf("%x", t.instanceID), "err", err.Error())
		tried[t.instanceID] = true
	}
}

// embedOn runs req on worker t.
func (s *Service) embedOn(ctx context.Context, t embedTarget, req *workerv1.EmbedRequest, payload []byte) (*workerv1.EmbedResponse, error) {
	addr, ok := transport.Pick(t.transport, s.routing.plane)
	if !ok {
		return nil, fmt.Errorf("%w: instance %x has no request plane address", ErrNoInstance, t.instanceID)
	}
	s.load.add(t.instanceID, 1)
	defer s.load.add(t.instanceID, -1)
	s.metrics.routed(t.instanceID)
	stream, err := s.client.Call(ctx, addr, wire.EmbedEndpoint, transport.Headers{transport.HeaderRequestID: req.RequestId}, payload)
	if err != nil {
		return nil, refused(err)
	}
	defer stream.Close()
	b, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: instance %x ended the embed call without an answer", ErrWorkerFailed, t.instanceID)
	}
	if err != nil {
		return nil, refused(err)
	}
	var resp workerv1.EmbedResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("%w: undecodable embed answer from instance %x: %v", ErrWorkerFailed, t.instanceID, err)
	}
	if len(resp.Embeddings) != len(req.Inputs) {
		return nil, fmt.Errorf("%w: instance %x answered %d embeddings for %d inputs", ErrWorkerFailed, t.instanceID, len(resp.Embeddings), len(req.Inputs))
	}
	return &resp, nil
}
