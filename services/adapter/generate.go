package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// completionRequest is the engine's OpenAI completions request, with the
// prompt as token ids and vLLM's sampling extensions.
type completionRequest struct {
	Model             string         `json:"model"`
	Prompt            []uint32       `json:"prompt"`
	MaxTokens         uint32         `json:"max_tokens,omitempty"`
	Stream            bool           `json:"stream"`
	StreamOptions     map[string]any `json:"stream_options,omitempty"`
	ReturnTokenIDs    bool           `json:"return_token_ids"`
	Temperature       float32        `json:"temperature"`
	TopP              float32        `json:"top_p,omitempty"`
	TopK              int32          `json:"top_k,omitempty"`
	MinP              float32        `json:"min_p,omitempty"`
	Seed              *uint64        `json:"seed,omitempty"`
	FrequencyPenalty  float32        `json:"frequency_penalty,omitempty"`
	PresencePenalty   float32        `json:"presence_penalty,omitempty"`
	RepetitionPenalty float32        `json:"repetition_penalty,omitempty"`
	StopTokenIDs      []uint32       `json:"stop_token_ids,omitempty"`
	IgnoreEOS         bool           `json:"ignore_eos,omitempty"`
	MinTokens         uint32         `json:"min_tokens,omitempty"`
	Stop              []string       `json:"stop,omitempty"`
	// Logprobs and PromptLogprobs ask for log probabilities (logprobs.go),
	// the tokens written as ids (ReturnTokensAsTokenIDs).
	Logprobs               *uint32 `json:"logprobs,omitempty"`
	PromptLogprobs         *uint32 `json:"prompt_logprobs,omitempty"`
	ReturnTokensAsTokenIDs bool    `json:"return_tokens_as_token_ids,omitempty"`
	// ResponseFormat and JSONSchema constrain the output (guided
	// decoding; responseFormat): OpenAI's response_format, which vLLM's
	// completions endpoint takes (v0.11), and SGLang's json_schema, the
	// schema as a string (its completions protocol, v0.4). Each engine
	// ignores the other's field.
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	JSONSchema     string          `json:"json_schema,omitempty"`
	// CacheSalt is vLLM's (and SGLang's) cache_salt: the engine mixes it
	// into the first block's hash, as the router and the frontend do.
	CacheSalt string `json:"cache_salt,omitempty"`
	// KVTransferParams are vLLM's, on the legs of a disaggregated request.
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
	// BootstrapHost, BootstrapPort and BootstrapRoom are SGLang's, on both
	// legs of a disaggregated request.
	BootstrapHost string  `json:"bootstrap_host,omitempty"`
	BootstrapPort int     `json:"bootstrap_port,omitempty"`
	BootstrapRoom *uint64 `json:"bootstrap_room,omitempty"`
}

// completionChunk is one SSE chunk of the engine's stream. The contract:
// choices[0].token_ids carries the new tokens when the engine returns them
// (vLLM with "return_token_ids"); without them only the text is forwarded.
type completionChunk struct {
	Choices []struct {
		Text         string   `json:"text"`
		TokenIDs     []uint32 `json:"token_ids"`
		FinishReason *string  `json:"finish_reason"`
		// Logprobs are the chunk's tokens' when asked for (logprobs.go).
		Logprobs *engineLogprobs `json:"logprobs"`
	} `json:"choices"`
	// Error is the engine's error chunk mid-stream: vLLM and SGLang send
	// {"error": {"message", "type", "param", "code"}} (older releases of
	// both add "object": "error" inside), then data: [DONE].
	Error *engineError `json:"error"`
	// Object is "error" when the chunk is the error object itself
	// ({"object": "error", "message", ...}, vLLM's ErrorResponse of old).
	Object string `json:"object"`
	engineError
	Usage *struct {
		PromptTokens        uint32 `json:"prompt_tokens"`
		CompletionTokens    uint32 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens uint32 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// engineError is an OpenAI-shaped error object as the engines write it;
// their code is the HTTP status as a number, OpenAI's a string.
type engineError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

// err is the engine's error as the caller gets it: a request the engine
// refused (HTTP 400 or 422, BadRequestError) is invalid_argument, anything
// else an engine_error, with the engine's type and message.
func (e *engineError) err() error {
	msg := e.Message
	if msg == "" {
		msg = "(no message)"
	}
	if e.Type != "" {
		msg = e.Type + ": " + msg
	}
	code := transport.CodeEngineError
	switch strings.Trim(string(e.Code), `"`) {
	case "400", "422":
		code = transport.CodeInvalidArgument
	default:
		if e.Type == "BadRequestError" || e.Type == "invalid_request_error" {
			code = transport.CodeInvalidArgument
		}
	}
	return &transport.HandlerError{Code: code, Message: "engine: " + msg}
}

// chunkError is the engine's error a stream chunk carries, or nil.
func (c *completionChunk) chunkError() *engineError {
	switch {
	case c.Error != nil:
		return c.Error
	case c.Object == "error":
		return &c.engineError
	}
	return nil
}

func finishReason(s string) workerv1.FinishReason {
	switch s {
	case "length":
		return workerv1.FinishReason_FINISH_REASON_LENGTH
	case "abort", "cancelled":
		return workerv1.FinishReason_FINISH_REASON_CANCELLED
	case "error":
		return workerv1.FinishReason_FINISH_REASON_ERROR
	}
	return workerv1.FinishReason_FINISH_REASON_STOP
}

// responseFormat is the engine's response_format for g: {"type":
// "json_object"}, or {"type": "json_schema", "json_schema": {"name",
// "schema", "strict": true}} with the schema as the frontend checked it.
func responseFormat(g *workerv1.GuidedDecoding) (json.RawMessage, error) {
	switch f := g.GetFormat().(type) {
	case *workerv1.GuidedDecoding_JsonObject:
		return json.RawMessage(`{"type":"json_object"}`), nil
	case *workerv1.GuidedDecoding_JsonSchema:
		schema := json.RawMessage(f.JsonSchema)
		if !json.Valid(schema) {
			return nil, &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "guided decoding: the JSON schema is not JSON"}
		}
		name := g.GetName()
		if name == "" {
			name = "output"
		}
		return json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": name, "schema": schema, "strict": true}})
	}
	return nil, &transport.HandlerError{Code: transport.CodeUnimplemented, Message: "guided decoding: a format this adapter does not know"}
}

// RankHeader is the request header that pins a request to one of the
// engine's data-parallel ranks: vLLM's OpenAI server reads it
// (case-insensitively) as the request's data_parallel_rank, and SGLang's
// data-parallel controller takes the same header.
const RankHeader = "X-Data-Parallel-Rank"

// dpRanks is how many data-parallel ranks the engine serves behind its one
// endpoint (--data-parallel-size; 0 and 1 mean one).
type dpRanks int

// check refuses a rank the engine does not serve, before any engine
// request, as the mocker does.
func (n dpRanks) check(rank uint32) error {
	if rank == 0 || int64(rank) < int64(n) {
		return nil
	}
	return &transport.HandlerError{Code: transport.CodeInvalidArgument,
		Message: fmt.Sprintf("dp_rank %d is out of range: this worker serves %d data-parallel rank(s), 0 to %d", rank, max(int(n), 1), max(int(n), 1)-1)}
}

// set names the router's rank to the engine when it serves several. With
// one rank the header is left out: the engine then has nothing to choose.
// Rank 0 is sent too: without the header the engine's own balancer would
// pick a rank, not necessarily the one whose cache the router counted on.
func (n dpRanks) set(h *http.Request, rank uint32) {
	if n > 1 {
		h.Header.Set(RankHeader, strconv.FormatUint(uint64(rank), 10))
	}
}

// completionsURL is the engine's completions endpoint.
func completionsURL(engineURL string) string {
	return strings.TrimSuffix(engineURL, "/") + "/completions"
}

// generate serves generate requests from the engine's streaming completions
// endpoint; the engine request is cancelled when the caller goes away. l
// relays the legs of disaggregated requests.
func generate(client *http.Client, engineURL, model string, l *legs) worker.Handler {
	url := completionsURL(engineURL)
	return func(ctx context.Context, req *workerv1.GenerateRequest, send func(*workerv1.GenerateResponse) error) error {
		if len(req.TokenIds) == 0 {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "empty prompt"}
		}
		if err := l.checkLeg(req); err != nil {
			return err
		}
		if err := l.ranks.check(req.DpRank); err != nil {
			return err
		}
		cr := completionRequest{Model: model, Prompt: req.TokenIds, MaxTokens: req.MaxTokens, Stream: true,
			StreamOptions: map[string]any{"include_usage": true}, ReturnTokenIDs: true, CacheSalt: req.GetCacheSalt()}
		if l := req.GetLoraName(); l != "" {
			// vLLM serves a LoRA adapter (--lora-modules name=path) as a
			// model of its own name: the request names it as its model.
			cr.Model = l
		}
		if s := req.Sampling; s != nil {
			cr.Temperature, cr.TopP, cr.MinP, cr.Seed = s.Temperature, s.TopP, s.MinP, s.Seed
			cr.FrequencyPenalty, cr.PresencePenalty, cr.RepetitionPenalty = s.FrequencyPenalty, s.PresencePenalty, s.RepetitionPenalty
			if s.TopK > 0 {
				cr.TopK = s.TopK
			}
		}
		if s := req.Stop; s != nil {
			cr.StopTokenIDs, cr.IgnoreEOS, cr.MinTokens, cr.Stop = s.StopTokenIds, s.IgnoreEos, s.MinTokens, s.StopStrings
		}
		cr.Logprobs, cr.PromptLogprobs, cr.ReturnTokensAsTokenIDs = req.Logprobs, req.PromptLogprobs, req.Logprobs != nil
		if g := req.GetGuidedDecoding(); g != nil {
			rf, err := responseFormat(g)
			if err != nil {
				return err
			}
			cr.ResponseFormat, cr.JSONSchema = rf, `{"type":"object"}`
			if s := g.GetJsonSchema(); s != "" {
				cr.JSONSchema = s
			}
		}
		whole := req.PromptLogprobs != nil
		if whole {
			if req.GetLeg() != workerv1.DisaggregationLeg_DISAGGREGATION_LEG_UNSPECIFIED {
				return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "prompt log probabilities on a leg of a disaggregated request are not supported"}
			}
			cr.Stream, cr.StreamOptions = false, nil
		}
		switch req.GetLeg() {
		case workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL:
			return l.prefill(ctx, req, cr, send)
		case workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE:
			if err := l.decodeRequest(req, &cr); err != nil {
				return err
			}
		}
		body, err := json.Marshal(cr)
		if err != nil {
			return err
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		hreq.Header.Set("Content-Type", "application/json")
		hreq.Header.Set("Accept", "text/event-stream")
		if req.RequestId != "" {
			hreq.Header.Set("X-Request-Id", req.RequestId)
		}
		l.ranks.set(hreq, req.DpRank)
		if whole {
			return generateWhole(ctx, client, hreq, req, send)
		}
		resp, err := client.Do(hreq)
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode == http.StatusBadRequest {
				return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: fmt.Sprintf("engine: %s", bytes.TrimSpace(msg))}
			}
			return fmt.Errorf("engine: %s: %s", resp.Status, bytes.TrimSpace(msg))
		}
		return relay(ctx, resp.Body, uint32(len(req.TokenIds)), req.Logprobs, send)
	}
}

// relay translates the engine's SSE stream, each chunk sent as it arrives
// except the one with the finish reason, held until the usage that follows.
// An error chunk (or an event of type error) ends the relay with the
// engine's error, whatever follows it: the caller must not take a failed
// generation for a finished one.
func relay(ctx context.Context, body io.Reader, promptTokens uint32, logprobs *uint32, send func(*workerv1.GenerateResponse) error) error {
	sse := newSSEReader(body)
	var pending *workerv1.GenerateResponse
	var completion uint32
	var usage *workerv1.Usage
	done := false
	for !done {
		ev, err := sse.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("engine stream: %w", err)
		}
		data := strings.TrimSpace(ev.Data)
		switch {
		case ev.Type == "error":
			e := &engineError{Message: data}
			var c completionChunk
			if json.Unmarshal([]byte(data), &c) == nil && c.chunkError() != nil {
				e = c.chunkError()
			}
			return e.err()
		case ev.Type != "message":
			continue // an event type the completions stream does not define
		case data == "[DONE]":
			done = true
			continue
		}
		var c completionChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return fmt.Errorf("engine: bad stream chunk: %w", err)
		}
		if e := c.chunkError(); e != nil {
			return e.err()
		}
		if c.Usage != nil {
			usage = &workerv1.Usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens}
			if d := c.Usage.PromptTokensDetails; d != nil {
				usage.CachedPromptTokens = d.CachedTokens
			}
		}
		if len(c.Choices) == 0 {
			continue
		}
		ch := c.Choices[0]
		r := &workerv1.GenerateResponse{TokenIds: ch.TokenIDs}
		if logprobs != nil {
			r.Logprobs = generatedLogprobs(ch.Logprobs, len(ch.TokenIDs), *logprobs)
		}
		if ch.Text != "" || len(ch.TokenIDs) == 0 {
			text := ch.Text
			r.Text = &text
		}
		completion += uint32(len(ch.TokenIDs))
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			r.FinishReason = finishReason(*ch.FinishReason)
		}
		if pending != nil {
			// More output after a finish reason: only the last response
			// carries one.
			pending.FinishReason = workerv1.FinishReason_FINISH_REASON_UNSPECIFIED
			if err := send(pending); err != nil {
				return err
			}
			pending = nil
		}
		if r.FinishReason != workerv1.FinishReason_FINISH_REASON_UNSPECIFIED {
			pending = r
			continue
		}
		if err := send(r); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if pending == nil {
		if !done {
			return errors.New("engine: stream ended without a finish reason")
		}
		pending = &workerv1.GenerateResponse{FinishReason: workerv1.FinishReason_FINISH_REASON_STOP}
	}
	if usage == nil {
		usage = &workerv1.Usage{PromptTokens: promptTokens, CompletionTokens: completion}
	}
	pending.Usage = usage
	return send(pending)
}
