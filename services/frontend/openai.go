package frontend

import (
	"errors"
	"math"
	"net/http"
	"strings"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// maxTopLogprobs is OpenAI's limit on top_logprobs (chat); completions
// allow up to 5 in logprobs.
const maxTopLogprobs, maxCompletionLogprobs = 20, 5

// maxChoices bounds n: each choice is a generation of its own.
const maxChoices = 8

// chatRequest is a decoded chat completion body with what validation adds.
type chatRequest struct {
	openai.ChatRequest

	// tools is the validated Tools and ToolChoice.
	tools preprocess.Tools
	// texts are the messages' contents flattened, when decodeChat set
	// them (content is decoded once: a long chat's messages are most of
	// its body).
	texts []string
}

// genParams is a validated request, independent of its endpoint.
type genParams struct {
	model        string
	stream       bool
	includeUsage bool
	// maxTokens is 0 when the client set none.
	maxTokens    uint32
	sampling     *workerv1.SamplingParameters
	stopStrings  []string
	stopTokenIDs []uint32
	ignoreEOS    bool
	minTokens    uint32
	// logprobs, when set, asks for log probabilities with this many top
	// alternatives.
	logprobs *uint32
	// echo puts the prompt before the generated text (completions);
	// promptLogprobs, set with echo and logprobs, asks the worker for the
	// prompt's log probabilities with this many top alternatives.
	echo           bool
	promptLogprobs *uint32
	// n is how many choices to generate.
	n int
	// guided is the output's required structure (structured.go); nil
	// for free text.
	guided *workerv1.GuidedDecoding
	// cacheSalt is the tenant's cache salt, empty for none: the router
	// and the worker hash the prompt's first block with it.
	cacheSalt string
	// lora is the LoRA adapter the client named as its model, empty for
	// the base model: serve sets it, and model to the adapter's base, once
	// the request's sinks have the name the client gave.
	lora string
	// session is the conversation's session id (the x-session-id or
	// X-Dynamo-Session-ID header), empty for none: the router keeps its
	// turns on one worker (sessions.go).
	session string
}

// invalid returns an error about request field param (400, naming it).
func invalid(param, format string, args ...any) error {
	return openai.Invalid(param, format, args...)
}

// decodeChat decodes and validates a chat completion request.
func decodeChat(body []byte) (*chatRequest, genParams, error) {
	var r chatRequest
	if err := openai.DecodeChat(body, &r.ChatRequest); err != nil {
		return nil, genParams{}, err
	}
	if err := chatPolicy.check(body); err != nil {
		return nil, genParams{}, err
	}
	if r.MaxCompletionTokens != nil {
		r.MaxTokens = r.MaxCompletionTokens
	}
	p, err := commonParams(&r.CommonRequest, r.Model)
	if err != nil {
		var pe *openai.ParamError
		if r.MaxCompletionTokens != nil && errors.As(err, &pe) && pe.Param == "max_tokens" {
			// The client named the length max_completion_tokens.
			pe.Param, pe.Message = "max_completion_tokens", strings.Replace(pe.Message, "max_tokens", "max_completion_tokens", 1)
		}
		return nil, genParams{}, err
	}
	if len(r.Messages) == 0 {
		return nil, genParams{}, invalid("messages", "messages must hold at least one message")
	}
	if p.guided, err = parseFormat(r.ResponseFormat, "response_format", true); err != nil {
		return nil, genParams{}, err
	}
	if r.tools, err = preprocess.ParseTools(r.Tools, r.ToolChoice, r.ParallelToolCalls); err != nil {
		return nil, genParams{}, err
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > maxTopLogprobs {
			return nil, genParams{}, invalid("top_logprobs", "top_logprobs must be between 0 and %d", maxTopLogprobs)
		}
		if r.Logprobs == nil || !*r.Logprobs {
			return nil, genParams{}, invalid("top_logprobs", "top_logprobs needs logprobs true")
		}
	}
	if r.Logprobs != nil && *r.Logprobs {
		top := uint32(0)
		if r.TopLogprobs != nil {
			top = uint32(*r.TopLogprobs)
		}
		p.logprobs = &top
	}
	if r.texts, err = preprocess.MessageTexts(r.Messages); err != nil {
		return nil, genParams{}, err
	}
	return &r, p, nil
}

// messages converts the request's messages for the chat template.
func (r *chatRequest) messages() []chattemplate.Message {
	return preprocess.ChatMessages(r.Messages, r.texts)
}

// decodeCompletion decodes and validates a completion request. The prompt
// is a string, an array of one string, an array of token ids or an array of
// one array of token ids; it returns the text or the token ids.
func decodeCompletion(body []byte) (*openai.CompletionRequest, genParams, string, []uint32, error) {
	var r openai.CompletionRequest
	if err := openai.DecodeCompletion(body, &r); err != nil {
		return nil, genParams{}, "", nil, err
	}
	if err := completionPolicy.check(body); err != nil {
		return nil, genParams{}, "", nil, err
	}
	p, err := commonParams(&r.CommonRequest, r.Model)
	if err != nil {
		return nil, genParams{}, "", nil, err
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, genParams{}, "", nil, invalid("suffix", "suffix is not supported")
	}
	if r.Logprobs != nil {
		if *r.Logprobs < 0 || *r.Logprobs > maxCompletionLogprobs {
			return nil, genParams{}, "", nil, invalid("logprobs", "logprobs must be between 0 and %d", maxCompletionLogprobs)
		}
		top := uint32(*r.Logprobs)
		p.logprobs = &top
		if r.Echo {
			p.promptLogprobs = &top
		}
	}
	p.echo = r.Echo
	text, ids, err := openai.Prompt(r.Prompt)
	if err != nil {
		return nil, genParams{}, "", nil, err
	}
	return &r, p, text, ids, nil
}

// commonParams validates what both endpoints share.
func commonParams(r *openai.CommonRequest, model string) (genParams, error) {
	if model == "" {
		return genParams{}, invalid("model", "model is required")
	}
	p := genParams{model: model, stream: r.Stream, ignoreEOS: r.IgnoreEOS, stopTokenIDs: r.StopTokenIDs,
		sampling: &workerv1.SamplingParameters{Temperature: 1, TopP: 1}}
	if r.StreamOptions != nil {
		if !r.Stream {
			return genParams{}, invalid("stream_options", "stream_options is only allowed with stream true")
		}
		p.includeUsage = r.StreamOptions.IncludeUsage
	}
	if r.CacheSalt != nil {
		if *r.CacheSalt == "" || len(*r.CacheSalt) > core.MaxCacheSaltLen {
			return genParams{}, invalid("cache_salt", "cache_salt must be a non-empty string of at most %d bytes when given", core.MaxCacheSaltLen)
		}
		p.cacheSalt = *r.CacheSalt
	}
	p.n = 1
	if r.N != nil {
		if *r.N < 1 || *r.N > maxChoices {
			return genParams{}, invalid("n", "n must be between 1 and %d, got %d", maxChoices, *r.N)
		}
		p.n = int(*r.N)
	}
	if r.MaxTokens != nil {
		if *r.MaxTokens < 1 || *r.MaxTokens > math.MaxUint32 {
			return genParams{}, invalid("max_tokens", "max_tokens must be between 1 and %d, got %d", uint32(math.MaxUint32), *r.MaxTokens)
		}
		p.maxTokens = uint32(*r.MaxTokens)
	}
	if r.MinTokens != nil {
		if *r.MinTokens < 0 || *r.MinTokens > math.MaxUint32 || (p.maxTokens > 0 && uint32(*r.MinTokens) > p.maxTokens) {
			return genParams{}, invalid("min_tokens", "min_tokens must be between 0 and max_tokens")
		}
		p.minTokens = uint32(*r.MinTokens)
	}
	type bound struct {
		name     string
		v        *float64
		lo, hi   float64
		dst      *float32
		exclLow  bool
		describe string
	}
	s := p.sampling
	for _, b := range []bound{
		{"temperature", r.Temperature, 0, 2, &s.Temperature, false, "between 0 and 2"},
		{"top_p", r.TopP, 0, 1, &s.TopP, true, "in (0, 1]"},
		{"min_p", r.MinP, 0, 1, &s.MinP, false, "between 0 and 1"},
		{"frequency_penalty", r.FrequencyPenalty, -2, 2, &s.FrequencyPenalty, false, "between -2 and 2"},
		{"presence_penalty", r.PresencePenalty, -2, 2, &s.PresencePenalty, false, "between -2 and 2"},
		{"repetition_penalty", r.RepetitionPenalty, 0, 2, &s.RepetitionPenalty, true, "in (0, 2]"},
	} {
		if b.v == nil {
			continue
		}
		v := *b.v
		if math.IsNaN(v) || v < b.lo || v > b.hi || (b.exclLow && v == b.lo) {
			return genParams{}, invalid(b.name, "%s must be %s, got %v", b.name, b.describe, v)
		}
		*b.dst = float32(v)
	}
	if r.TopK != nil {
		if *r.TopK < -1 || *r.TopK > math.MaxInt32 {
			return genParams{}, invalid("top_k", "top_k must be -1, 0 or positive, got %d", *r.TopK)
		}
		if *r.TopK > 0 {
			s.TopK = int32(*r.TopK)
		}
	}
	if r.Seed != nil {
		seed := uint64(*r.Seed)
		s.Seed = &seed
	}
	stops, err := openai.StopSequences(r.Stop)
	if err != nil {
		return genParams{}, err
	}
	p.stopStrings = stops
	return p, nil
}

// workerFinishLength is the worker's finish reason for a length limit.
const workerFinishLength = workerv1.FinishReason_FINISH_REASON_LENGTH

// sink writes one request's output in its endpoint's shape, streamed or not.
type sink interface {
	requestID() string
	// header is the header of what the sink writes to, before it is out.
	header() http.Header
	// tokens records generated tokens and their log probabilities (when
	// asked for), before their text is passed to delta. more says that
	// further tokens are already waiting: streamed events are then written
	// without a flush, which the next batch's last event does.
	tokens(ids []uint32, lps []*workerv1.TokenLogprob, more bool)
	// delta sends generated text.
	delta(text string) error
	// end finishes the response.
	end(finish string, u openai.Usage) error
	// fail ends the response with err: an error status before anything was
	// streamed, an SSE error event and [DONE] after.
	fail(err error)
}

// promptSink is a sink that takes the prompt's log probabilities (a
// completion with echo and logprobs).
type promptSink interface {
	promptLogprobs(lps []*workerv1.TokenLogprob)
}

// failStream ends a response with err: an error status when nothing was
// sent yet, else an SSE error event and [DONE].
func failStream(e *openai.SSE, err error) {
	if !e.Started() && !started(e.W) {
		writeError(e.W, err)
		return
	}
	_, body := errorStatus(err)
	_ = e.Send(openai.ErrorBody{Error: body})
	_ = e.Done()
}

// completionSink writes text completions.
type completionSink struct {
	w            http.ResponseWriter
	sse          openai.SSE
	stream       bool
	includeUsage bool
	id, model    string
	fingerprint  string
	created      int64
	index        int
	group        *choiceGroup
	logprobs     *logprobOut // nil without logprobs
	text         strings.Builder
	// echo, when set, is the prompt to put before the generated text (and
	// its tokens' entries before theirs in logprobs); it goes out with the
	// first text or at the end, whichever comes first.
	echo *echoPrompt
}

// echoPrompt is a completion's prompt as echo returns it.
type echoPrompt struct {
	text string
	ids  []uint32
	// logprobs are the worker's for ids[1:], when asked for.
	logprobs []*workerv1.TokenLogprob
	sent     bool
}

// promptLogprobs takes the worker's log probabilities of the prompt.
func (c *completionSink) promptLogprobs(lps []*workerv1.TokenLogprob) {
	if c.echo != nil {
		c.echo.logprobs = lps
	}
}

// echoed returns text with the prompt before it the first time, after
// putting the prompt's logprobs entries before the pending ones.
func (c *completionSink) echoed(text string) string {
	e := c.echo
	if e == nil || e.sent {
		return text
	}
	e.sent = true
	if c.logprobs != nil {
		c.logprobs.prependPrompt(e.ids, e.logprobs)
	}
	return e.text + text
}

func (c *completionSink) requestID() string { return c.id }

func (c *completionSink) header() http.Header { return c.w.Header() }

func (c *completionSink) tokens(ids []uint32, lps []*workerv1.TokenLogprob, more bool) {
	c.logprobs.add(ids, lps)
	c.sse.Batch = more
}

func (c *completionSink) chunk(text string, finish *string) openai.Completion {
	ch := openai.Completion{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model, SystemFingerprint: c.fingerprint,
		Choices: []openai.CompletionChoice{{Index: c.index, Text: text, FinishReason: finish}}}
	if c.logprobs != nil {
		ch.Choices[0].Logprobs = c.logprobs.takeCompletion()
	}
	return ch
}

func (c *completionSink) delta(text string) error {
	text = c.echoed(text)
	if !c.stream {
		c.text.WriteString(text)
		return nil
	}
	c.sse.W = c.w
	return c.sse.Send(c.chunk(text, nil))
}

func (c *completionSink) end(finish string, u openai.Usage) error {
	if c.echo != nil && !c.echo.sent {
		// Nothing was generated: the prompt alone.
		if err := c.delta(""); err != nil {
			return err
		}
	}
	if !c.stream {
		out := c.chunk(c.text.String(), &finish)
		last, all, total := c.group.addCompletion(out.Choices[0], u)
		if last {
			out.Choices, out.Usage = all, &total
			writeJSON(c.w, http.StatusOK, out)
		}
		return nil
	}
	c.sse.W = c.w
	last, total := c.group.end(u)
	if last {
		// What follows ends the response: it goes out with the response's
		// end when the handler returns (SSE.Last).
		c.sse.Batch = true
	}
	if err := c.sse.Send(c.chunk("", &finish)); err != nil {
		return err
	}
	if !last {
		return nil
	}
	defer c.group.close()
	if c.includeUsage {
		ch := c.chunk("", nil)
		ch.Choices, ch.Usage = []openai.CompletionChoice{}, &total
		if err := c.sse.Send(ch); err != nil {
			return err
		}
	}
	return c.sse.Last()
}

func (c *completionSink) fail(err error) {
	if !c.group.fail() {
		return
	}
	c.sse.W = c.w
	failStream(&c.sse, err)
	c.group.close()
}
