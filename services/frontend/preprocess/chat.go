package preprocess

import (
	"context"
	"fmt"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// MessageTexts validates a chat request's messages (their roles and
// content) and returns each one's content flattened to text. Its errors are
// openai.ParamErrors naming the message.
func MessageTexts(msgs []openai.ChatMessage) ([]string, error) {
	texts := make([]string, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, openai.Invalid(fmt.Sprintf("messages[%d].role", i), "invalid role %q: valid roles are system, developer, user, assistant, tool", m.Role)
		}
		text, err := openai.ContentText(m.Content)
		if err != nil {
			return nil, openai.Invalid(fmt.Sprintf("messages[%d].content", i), "%v", err)
		}
		texts[i] = text
	}
	return texts, nil
}

// ChatMessages converts a chat request's messages for the chat template:
// developer messages are system ones. texts are the messages' flattened
// contents from MessageTexts; a message past its end is flattened here.
func ChatMessages(msgs []openai.ChatMessage, texts []string) []chattemplate.Message {
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		var text string
		if i < len(texts) {
			text = texts[i]
		} else {
			text, _ = openai.ContentText(m.Content)
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		out[i] = chattemplate.Message{Role: role, Content: text, ReasoningContent: m.ReasoningContent,
			ToolCalls: templateToolCalls(m.ToolCalls), Name: m.Name, ToolCallID: m.ToolCallID}
	}
	return out
}

// templateToolCalls converts a message's tool calls for the chat template.
func templateToolCalls(calls []openai.ToolCall) []chattemplate.ToolCall {
	if calls == nil {
		return nil
	}
	out := make([]chattemplate.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = chattemplate.ToolCall{ID: c.ID, Type: c.Type,
			Function: chattemplate.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}}
	}
	return out
}

// PromptTokens returns the prompt token ids the frontend would route for an
// OpenAI request body: with chat, a /v1/chat/completions body (its messages
// rendered by the model's chat template), else a /v1/completions body. The
// tokenizer and template come from the eventbus object store as card
// references them, as the frontend loads them. `switchyard route` uses it so
// that what it explains is what the frontend would ask the router.
//
// It checks what shapes the prompt (the model, messages, tools and
// tool_choice, the prompt) with the frontend's errors; the sampling and
// length fields, which do not change the prompt, it leaves alone.
func PromptTokens(ctx context.Context, bus *eventbusclient.Client, card *registryv1.ModelCard, body []byte, chat bool) ([]uint32, error) {
	a, err := NewAssetCache(bus).Get(ctx, ctx, card)
	if err != nil {
		return nil, err
	}
	if chat {
		var r openai.ChatRequest
		if err := openai.DecodeChat(body, &r); err != nil {
			return nil, err
		}
		if r.Model == "" {
			return nil, openai.Invalid("model", "model is required")
		}
		if len(r.Messages) == 0 {
			return nil, openai.Invalid("messages", "messages must hold at least one message")
		}
		tools, err := ParseTools(r.Tools, r.ToolChoice, r.ParallelToolCalls)
		if err != nil {
			return nil, err
		}
		texts, err := MessageTexts(r.Messages)
		if err != nil {
			return nil, err
		}
		if err := sameModel(r.Model, card); err != nil {
			return nil, err
		}
		// As the frontend answers a chat request it cannot render.
		if !a.HasTemplate() {
			return nil, openai.Invalid("messages", "the model has no chat template; use /v1/completions")
		}
		text, err := a.Render(ChatMessages(r.Messages, texts), tools.Template(), r.ChatTemplateKwargs)
		if err != nil {
			return nil, openai.Invalid("messages", "the chat template cannot render these messages: %v", err)
		}
		return a.Encode(text), nil
	}
	var r openai.CompletionRequest
	if err := openai.DecodeCompletion(body, &r); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, openai.Invalid("model", "model is required")
	}
	text, ids, err := openai.Prompt(r.Prompt)
	if err != nil {
		return nil, err
	}
	if err := sameModel(r.Model, card); err != nil {
		return nil, err
	}
	if ids == nil {
		ids = a.Encode(text)
	}
	return ids, nil
}

// sameModel refuses a body that names another model than the card.
func sameModel(model string, card *registryv1.ModelCard) error {
	if model != card.GetModelName() {
		return fmt.Errorf("%w: the body names model %q, the card %q", openai.ErrInvalidRequest, model, card.GetModelName())
	}
	return nil
}
