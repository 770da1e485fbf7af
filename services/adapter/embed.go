package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// embeddingsRequest is the engine's OpenAI embeddings request, the inputs
// as token ids (vLLM and SGLang take arrays of token id arrays).
type embeddingsRequest struct {
	Model          string     `json:"model"`
	Input          [][]uint32 `json:"input"`
	EncodingFormat string     `json:"encoding_format"`
	Dimensions     *uint32    `json:"dimensions,omitempty"`
}

// embeddingsAnswer is the engine's answer.
type embeddingsAnswer struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Usage *struct {
		PromptTokens uint32 `json:"prompt_tokens"`
	} `json:"usage"`
	Error  *engineError `json:"error"`
	Object string       `json:"object"`
	engineError
}

// maxEmbeddingsAnswer bounds the engine's answer: 2,048 inputs of 4,096
// dimensions as JSON numbers.
const maxEmbeddingsAnswer = 256 << 20

// embed serves embed requests from the engine's embeddings endpoint.
func embed(client *http.Client, engineURL, model string) worker.EmbedHandler {
	url := strings.TrimSuffix(engineURL, "/") + "/embeddings"
	return func(ctx context.Context, req *workerv1.EmbedRequest) (*workerv1.EmbedResponse, error) {
		er := embeddingsRequest{Model: model, EncodingFormat: "float", Dimensions: req.Dimensions}
		for _, in := range req.Inputs {
			er.Input = append(er.Input, in.TokenIds)
		}
		body, err := json.Marshal(er)
		if err != nil {
			return nil, err
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		hreq.Header.Set("Content-Type", "application/json")
		if req.RequestId != "" {
			hreq.Header.Set("X-Request-Id", req.RequestId)
		}
		resp, err := client.Do(hreq)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("engine: %w", err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxEmbeddingsAnswer+1))
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			msg := strings.TrimSpace(string(raw[:min(len(raw), 4096)]))
			if resp.StatusCode == http.StatusBadRequest {
				return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "engine: " + msg}
			}
			return nil, fmt.Errorf("engine: %s: %s", resp.Status, msg)
		}
		if len(raw) > maxEmbeddingsAnswer {
			return nil, fmt.Errorf("engine: embeddings answer past %d bytes", maxEmbeddingsAnswer)
		}
		return decodeEmbeddings(raw, req)
	}
}

// decodeEmbeddings reads the engine's answer to req: one embedding per
// input, placed by index.
func decodeEmbeddings(raw []byte, req *workerv1.EmbedRequest) (*workerv1.EmbedResponse, error) {
	var a embeddingsAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("engine: bad embeddings answer: %w", err)
	}
	if a.Error != nil {
		return nil, a.Error.err()
	}
	if a.Object == "error" {
		return nil, a.engineError.err()
	}
	if len(a.Data) != len(req.Inputs) {
		return nil, fmt.Errorf("engine: %d embeddings for %d inputs", len(a.Data), len(req.Inputs))
	}
	out := &workerv1.EmbedResponse{Embeddings: make([]*workerv1.Embedding, len(req.Inputs))}
	for _, d := range a.Data {
		if d.Index < 0 || d.Index >= len(out.Embeddings) || out.Embeddings[d.Index] != nil {
			return nil, fmt.Errorf("engine: embedding index %d out of range or repeated", d.Index)
		}
		out.Embeddings[d.Index] = &workerv1.Embedding{Values: d.Embedding}
	}
	for _, in := range req.Inputs {
		out.PromptTokens += uint32(len(in.TokenIds))
	}
	if a.Usage != nil {
		out.PromptTokens = a.Usage.PromptTokens
	}
	return out, nil
}
