package transport

import (
	"context"
	"log/slog"
)

// Headers travel beside a request's payload: request id, trace context
// (traceparent, tracestate) and the like. Keys should be lower-case ASCII
// tokens, as the http plane carries them in HTTP header fields, whose names
// are case-insensitive.
type Headers map[string]string

// Well-known header keys.
const (
	HeaderRequestID   = "x-request-id"
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Request is one incoming call as a [Handler] sees it.
type Request struct {
	// Endpoint is the endpoint name the client called.
	Endpoint string
	// Headers are the client's headers; never nil.
	Headers Headers
	// Payload is the opaque request body.
	Payload []byte
}

// ResponseWriter streams a handler's responses back to the caller on the
// connection or stream that carried the request. It is not safe for
// concurrent use.
type ResponseWriter interface {
	// Send delivers one response payload. It blocks while the client's
	// window is full (back-pressure). It returns an error wrapping
	// ErrTooLarge for a payload over the message size limit (nothing is
	// sent; the stream stays usable), the context's error once the call is
	// cancelled, and ErrDisconnected or ErrClosed when the stream is gone.
	Send(payload []byte) error
}

// Handler serves one endpoint. It runs on its own goroutine per request; ctx
// ends when the caller cancels, disconnects, or the server closes. Returning
// nil ends the stream cleanly (the client sees io.EOF); returning an error
// ends it with that error, delivered to the client as a [*HandlerError].
type Handler func(ctx context.Context, req *Request, w ResponseWriter) error

// Server serves named endpoints on one request plane.
type Server interface {
	// Handle registers h for endpoint. Register every endpoint before Start.
	Handle(endpoint string, h Handler)
	// Start begins serving: it binds the listener or subscribes. It
	// returns ErrCannotConnect (nats) when the NATS server is unreachable.
	Start(ctx context.Context) error
	// Address returns where endpoint is served, for the registry (on the
	// first plane, for a server of several). It is valid after Start.
	Address(endpoint string) Address
	// Addresses returns where endpoint is served on every plane the server
	// serves, the first being Address's; register them all
	// ([TransportOf]). It is valid after Start.
	Addresses(endpoint string) []Address
	// Drain stops taking new requests (they fail with ErrDraining, which
	// a client may retry elsewhere), waits for in-flight requests until ctx
	// ends, then closes the server. If ctx ends first the remaining
	// handlers are cancelled and Drain returns ctx's error.
	Drain(ctx context.Context) error
	// Close stops serving at once: connections drop (callers see
	// ErrDisconnected), handler contexts are cancelled, and Close waits for
	// every goroutine the server started, handlers included.
	Close() error
}

// Client calls endpoints on any server of its plane. It is safe for
// concurrent use.
type Client interface {
	// Call sends one request to endpoint at addr and returns the stream of
	// responses. It returns an error wrapping ErrCannotConnect when the
	// server cannot be reached, ErrTooLarge when payload exceeds the
	// message size limit (nothing is sent), ErrClosed after Close, and
	// ctx's error. Errors the server raises (ErrDraining, ErrNoHandler, a
	// handler's *HandlerError) arrive from Stream.Recv. Cancelling ctx
	// cancels the handler's context.
	Call(ctx context.Context, addr Address, endpoint string, headers Headers, payload []byte) (Stream, error)
	// Close closes the client's connections; open streams fail with
	// ErrDisconnected or ErrClosed.
	Close() error
}

// Pending is implemented by the streams of every plane: it reports whether
// a response has already arrived, so that the next Recv returns without
// waiting. A caller that relays responses uses it to write a batch of them
// at once instead of one write (and one syscall) per response.
type Pending interface {
	Pending() bool
}

// Stream is the response side of one call.
type Stream interface {
	// Recv returns the next response payload. It returns io.EOF when the
	// handler finished cleanly, a *HandlerError when the handler failed
	// (errors.Is maps reserved codes to ErrTooLarge, ErrDraining,
	// ErrNoHandler), ErrDisconnected when the stream broke, ErrTimeout when
	// the first response did not arrive within the request timeout, and
	// the call context's error when it ended. After an error every later
	// call returns the same error.
	Recv() ([]byte, error)
	// Close abandons the stream; if it has not ended the handler is
	// cancelled. Close is idempotent and must be called unless Recv
	// returned an error.
	Close()
}

// Option customises [NewServer] and [NewClient].
type Option func(*options)

type options struct {
	log *slog.Logger
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

func buildOptions(opts []Option) options {
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// NewServer returns a server for cfg.Plane, or for every plane of
// cfg.Planes (the same handlers on each). It does not bind or connect
// until Start.
func NewServer(cfg Config, opts ...Option) (Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	if planes := cfg.ServedPlanes(); len(planes) > 1 {
		ms := &multiServer{}
		for _, p := range planes {
			pc := cfg
			pc.Plane, pc.Planes = p, nil
			ms.servers = append(ms.servers, newPlaneServer(pc, o))
		}
		return ms, nil
	}
	return newPlaneServer(cfg, o), nil
}

// newPlaneServer is the server of cfg.Plane.
func newPlaneServer(cfg Config, o options) Server {
	return planeOrTCP(cfg.Plane).newServer(cfg, o)
}

// planeOrTCP is p's spec; tcp's for a name Validate accepts that is not
// spelled as a plane's constant (another case).
func planeOrTCP(p Plane) *planeSpec {
	if s, ok := planeOf(p); ok {
		return s
	}
	return &tcpPlane
}

// NewClient returns a client that calls every address with the plane the
// address names ([Address.Kind]), whatever cfg.Plane is: the registry records
// each instance's plane, and one fleet may mix them. cfg.Plane's client is
// made here (the nats one connects to the NATS server and returns an error
// wrapping ErrCannotConnect if it cannot); the others on their first call.
// The tcp and http clients connect lazily on Call.
func NewClient(cfg Config, opts ...Option) (Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newMultiClient(cfg, buildOptions(opts))
}

// NewPlaneClient returns a client of cfg.Plane alone, which refuses
// addresses of another plane; NewClient is what applications want.
func NewPlaneClient(cfg Config, opts ...Option) (Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return planeOrTCP(cfg.Plane).newClient(cfg, buildOptions(opts))
}
