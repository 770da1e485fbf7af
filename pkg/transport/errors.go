package transport

import (
	"errors"
	"fmt"
)

// Sentinel errors returned by [Client.Call], [Stream.Recv] and
// [ResponseWriter.Send]. They are wrapped with detail, so test for them with
// errors.Is.
var (
	// ErrCannotConnect means the call never reached a server: nothing listens
	// at the address, the connection attempt timed out, or (NATS) no
	// subscriber serves the subject. The request was not delivered, so it is
	// safe to retry elsewhere.
	ErrCannotConnect = errors.New("transport: cannot connect")

	// ErrDisconnected means the connection or stream broke before the
	// server ended the stream. It is distinct from io.EOF, which marks a
	// clean end.
	ErrDisconnected = errors.New("transport: disconnected mid-stream")

	// ErrTimeout means no response arrived within the request timeout.
	ErrTimeout = errors.New("transport: request timed out")

	// ErrTooLarge means a request or response payload exceeds the message
	// size limit; the error text names the limit.
	ErrTooLarge = errors.New("transport: message too large")

	// ErrDraining means the server is draining and refused a new request;
	// retry on another instance.
	ErrDraining = errors.New("transport: server is draining")

	// ErrNoHandler means the server has no handler for the endpoint.
	ErrNoHandler = errors.New("transport: no handler for endpoint")

	// ErrClosed means the client or server was closed.
	ErrClosed = errors.New("transport: closed")
)

// Reserved error codes the transport itself sends in place of a handler's
// code. [HandlerError.Is] maps them back to the sentinels above, so a client
// can use errors.Is whichever side detected the problem.
const (
	CodeUnknown   = "unknown"
	CodeTooLarge  = "too_large"
	CodeDraining  = "draining"
	CodeNoHandler = "no_handler"
	CodeTimeout   = "timeout"
	// CodeDisconnected is sent by a nats server that closes with streams
	// open, so its clients need not wait for the heartbeat to lapse.
	CodeDisconnected = "disconnected"
)

// Codes a handler sends with a [HandlerError] for its own failures, which
// callers branch on. Workers in other languages send the same strings.
const (
	// CodeInvalidArgument refuses a request that is malformed or asks what
	// the worker does not support (an empty prompt, a bad handoff): the
	// same request fails on any worker, so the frontend answers 400 with
	// the message instead of retrying elsewhere.
	CodeInvalidArgument = "invalid_argument"
	// CodeUnimplemented refuses a request for a feature the worker does not
	// implement; the frontend treats it as CodeInvalidArgument.
	CodeUnimplemented = "unimplemented"
	// CodeInternal is a handler that failed on its own (the tcp server
	// sends it for a handler that panicked).
	CodeInternal = "internal"
	// CodeEngineError is an engine behind the worker that failed the
	// request (the engine adapter's other errors).
	CodeEngineError = "engine_error"
)

// HandlerError is an error that travels from the handler to the client: a
// machine-readable Code and a human-readable Message. A handler that returns
// a *HandlerError has its Code and Message delivered as they are; any other
// non-nil error arrives with Code [CodeUnknown] and the error's text.
type HandlerError struct {
	// Code identifies the kind of failure, for example
	// [CodeInvalidArgument].
	Code string
	// Message describes the failure for humans.
	Message string
}

// Error returns the code and the message.
func (e *HandlerError) Error() string {
	return fmt.Sprintf("transport: handler error %s: %s", e.Code, e.Message)
}

// Is reports whether a reserved code corresponds to target, so that
// errors.Is(err, ErrTooLarge) holds for a too-large error raised on the
// server side.
func (e *HandlerError) Is(target error) bool {
	switch e.Code {
	case CodeTooLarge:
		return target == ErrTooLarge
	case CodeDraining:
		return target == ErrDraining
	case CodeNoHandler:
		return target == ErrNoHandler
	case CodeTimeout:
		return target == ErrTimeout
	case CodeDisconnected:
		return target == ErrDisconnected
	}
	return false
}

// toHandlerError converts the error a handler returned into what travels to
// the client.
func toHandlerError(err error) *HandlerError {
	var he *HandlerError
	if errors.As(err, &he) {
		return he
	}
	code := CodeUnknown
	switch {
	case errors.Is(err, ErrTooLarge):
		code = CodeTooLarge
	case errors.Is(err, ErrDraining):
		code = CodeDraining
	case errors.Is(err, ErrNoHandler):
		code = CodeNoHandler
	}
	return &HandlerError{Code: code, Message: err.Error()}
}

// tooLarge builds the error for a payload of n bytes over limit.
func tooLarge(what string, n, limit int) error {
	return fmt.Errorf("%w: %s of %d bytes exceeds the limit of %d bytes", ErrTooLarge, what, n, limit)
}
