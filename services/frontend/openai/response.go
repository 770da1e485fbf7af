package openai

// Response bodies, in OpenAI's shapes. A pointer field is null when nil
// unless its tag says omitempty.

// Usage is a response's token counts.
type Usage struct {
	PromptTokens        uint32               `json:"prompt_tokens"`
	CompletionTokens    uint32               `json:"completion_tokens"`
	TotalTokens         uint32               `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails breaks the prompt's tokens down: how many were
// served from the prefix cache.
type PromptTokensDetails struct {
	CachedTokens uint32 `json:"cached_tokens"`
}

// Completion is the body of a text completion, and of each chunk of a
// streamed one (object "text_completion" either way).
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a Completion.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	FinishReason *string             `json:"finish_reason"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
}

// CompletionLogprobs is a text completion choice's (legacy) logprobs
// object. With echo, the prompt's first token has a null log probability
// and null top_logprobs (nothing precedes it), as OpenAI and vLLM answer.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float32           `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// ChatCompletion is the body of a chat completion that is not streamed.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index        int            `json:"index"`
	Message      ChatMessageOut `json:"message"`
	FinishReason string         `json:"finish_reason"`
	Logprobs     *ChatLogprobs  `json:"logprobs"`
}

// ChatMessageOut is the assistant's message in a ChatChoice.
type ChatMessageOut struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	Refusal          *string       `json:"refusal"`
	ToolCalls        []ToolCallOut `json:"tool_calls,omitempty"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
}

// ToolCallOut is a tool call the model made, whole in a ChatMessageOut or
// in parts in streamed ChatDeltas.
type ToolCallOut struct {
	// Index is the call's position among the message's calls; streamed
	// deltas only.
	Index    *int            `json:"index,omitempty"`
	ID       string          `json:"id,omitempty"`
	Type     string          `json:"type,omitempty"`
	Function FunctionCallOut `json:"function"`
}

// FunctionCallOut is the function a ToolCallOut calls; Arguments is a JSON
// string (a part of it in a streamed delta).
type FunctionCallOut struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChatChunk is one event of a streamed chat completion
// (object "chat.completion.chunk").
type ChatChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint"`
	Choices           []ChatChunkChoice `json:"choices"`
	Usage             *Usage            `json:"usage,omitempty"`
}

// ChatChunkChoice is one choice of a ChatChunk.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	FinishReason *string       `json:"finish_reason"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
}

// ChatDelta is what a ChatChunkChoice adds to the message.
type ChatDelta struct {
	Role             string        `json:"role,omitempty"`
	Content          *string       `json:"content,omitempty"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCallOut `json:"tool_calls,omitempty"`
}

// ChatLogprobs is a chat choice's logprobs object.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// TokenLogprob is one token's log probability and its most likely
// alternatives.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative of a TokenLogprob.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root and Parent are set for a LoRA adapter, as vLLM lists one: its
	// path (when its worker gave one) and its base model.
	Root   string `json:"root,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}
