// Package openai is the OpenAI HTTP API as the frontend speaks it: the
// bodies of chat completion and completion requests and how they are
// decoded, the response and streaming chunk bodies, server-sent events, and
// the error body.
//
// It knows the protocol only. What a request means for generation (its
// validated parameters, the model's tokenizer and chat template, routing)
// is the frontend's; this package has no dependency on the rest of
// Switchyard, so its JSON shapes can be read and tested on their own. Field
// names, error messages and the bytes of every body are contracts that
// OpenAI's SDKs depend on: a change here is a change of the API.
//
// Request bodies are decoded by a hand-written decoder (DecodeChat,
// DecodeCompletion) that gives exactly the value encoding/json would, and
// falls back to encoding/json for what it does not take; FuzzFastDecode
// holds the two to each other.
package openai
