package openai

import (
	"errors"
	"fmt"
)

// ErrInvalidRequest is a malformed body or an invalid field: OpenAI answers
// it with 400 and an invalid_request_error.
var ErrInvalidRequest = errors.New("invalid request")

// ParamError is a client error about one request field. Its error body
// names the field as param, and code when Code is set. It wraps
// ErrInvalidRequest.
type ParamError struct {
	// Param is the field's JSON path ("messages[2].content"), empty when
	// the error is about the body as a whole.
	Param string
	// Code is OpenAI's machine-readable code ("context_length_exceeded"),
	// empty for none.
	Code string
	// Message is the error message the client reads.
	Message string
}

// Error returns the message.
func (e *ParamError) Error() string { return e.Message }

// Unwrap returns ErrInvalidRequest.
func (e *ParamError) Unwrap() error { return ErrInvalidRequest }

// Invalid returns a ParamError about param with a formatted message.
func Invalid(param, format string, args ...any) error {
	return &ParamError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// ErrorBody is OpenAI's error response body: {"error": {...}}, the body of
// every error status and of an error event ending a stream.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error object of an ErrorBody. Param and Code are null
// when not set.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
