package frontend

import (
	"context"
	"fmt"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

// PromptTokens returns the prompt token ids the frontend would route for an
// OpenAI request body: with chat, a /v1/chat/completions body (its messages
// rendered by the model's chat template), else a /v1/completions body. The
// tokenizer and template come from the eventbus object store as card
// references them, as the frontend loads them. `switchyard route` uses it so
// that what it explains is what the frontend would ask the router.
func PromptTokens(ctx context.Context, bus *eventbusclient.Client, card *registryv1.ModelCard, body []byte, chat bool) ([]uint32, error) {
	pa, err := preprocess.NewAssetCache(bus).Get(ctx, ctx, card)
	if err != nil {
		return nil, err
	}
	a := &assets{Assets: pa}
	if chat {
		req, p, err := decodeChat(body)
		if err != nil {
			return nil, err
		}
		if p.model != card.GetModelName() {
			return nil, fmt.Errorf("%w: the body names model %q, the card %q", ErrInvalidRequest, p.model, card.GetModelName())
		}
		return a.chatPrompt(ctx, req)
	}
	_, p, text, ids, err := decodeCompletion(body)
	if err != nil {
		return nil, err
	}
	if p.model != card.GetModelName() {
		return nil, fmt.Errorf("%w: the body names model %q, the card %q", ErrInvalidRequest, p.model, card.GetModelName())
	}
	if ids == nil {
		ids = a.Encode(text)
	}
	return ids, nil
}
