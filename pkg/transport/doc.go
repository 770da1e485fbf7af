// Package transport is Switchyard's request plane: how a request travels from
// the frontend to a worker and how the worker's responses stream back.
//
// One [Server] interface and one [Client] interface hide three planes, chosen
// with DYN_REQUEST_PLANE (see [ConfigFromEnv]):
//
//   - tcp (default): a compact binary framing over pooled TCP connections, many
//     request streams multiplexed per connection, per-stream credit for
//     back-pressure and coalesced writes.
//   - http: HTTP/2 cleartext (h2c) or HTTP/1.1, one POST per request, responses
//     streamed in the body as length-prefixed frames, so a worker in any
//     language can serve the plane with its standard library.
//   - nats: a NATS subject per instance endpoint, responses on the request's
//     reply inbox with sequence numbers, cancellation and credit on a control
//     subject.
//
// DYN_REQUEST_PLANE may list several planes (tcp,http): the server then
// serves every endpoint on each and reports all their addresses
// ([Server.Addresses]), which a worker registers as one
// switchyard.common.v1.Transport. A client from [NewClient] speaks every
// plane and calls each address with the plane it names.
//
// In every plane the responses come back on the connection or stream that
// carried the request; a worker never dials back to its caller.
//
// A call is one request in and a stream of responses out. Payloads are opaque
// bytes; each request carries [Headers] (request id, trace context) beside its
// payload. Errors are typed: a handler's own error arrives as a
// [*HandlerError], and the sentinels [ErrCannotConnect], [ErrDisconnected],
// [ErrTimeout], [ErrTooLarge], [ErrDraining] and [ErrNoHandler] work with
// errors.Is. A clean end of stream is io.EOF; a broken one is
// [ErrDisconnected], so callers can tell a finished stream from one to retry
// elsewhere.
package transport
