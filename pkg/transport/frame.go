package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The tcp plane's wire format. Every frame is a 10-byte header followed by
// Length bytes of payload:
//
//	stream id  uint32 big-endian  chosen by the client, unique per connection
//	type       uint8              one of the frame* constants
//	flags      uint8              reserved; senders write 0, receivers ignore
//	length     uint32 big-endian  payload bytes that follow
//
// A request frame's payload is a request body (see appendRequestBody); data
// frames carry one response payload; an error frame carries an error body
// (see appendErrorBody); a credit frame carries a uint32 count of data frames
// the client has consumed; end and cancel frames are empty.
const frameHeaderSize = 10

// Frame types. The http and nats planes reuse data, end, error, credit and
// cancel with their own envelopes.
const (
	frameRequest   byte = 1 // client -> server: start a stream
	frameData      byte = 2 // server -> client: one response
	frameEnd       byte = 3 // server -> client: clean end (io.EOF)
	frameError     byte = 4 // server -> client: failed end (*HandlerError)
	frameCancel    byte = 5 // client -> server: cancel the handler
	frameCredit    byte = 6 // client -> server: grant more data frames
	frameHeartbeat byte = 7 // server -> client (nats): the stream is alive
)

// maxHeaderBytes bounds the endpoint name and headers of one request.
const maxHeaderBytes = 64 << 10

// errProtocol marks a malformed frame; the connection carrying it is closed.
var errProtocol = errors.New("transport: protocol error")

// frameHeader is the decoded fixed part of a frame.
type frameHeader struct {
	stream uint32
	typ    byte
	flags  byte
	length uint32
}

func appendFrameHeader(b []byte, h frameHeader) []byte {
	b = binary.BigEndian.AppendUint32(b, h.stream)
	b = append(b, h.typ, h.flags)
	return binary.BigEndian.AppendUint32(b, h.length)
}

// parseFrameHeader decodes a header and checks it against maxPayload, the
// largest payload any frame of this connection may carry.
func parseFrameHeader(b []byte, maxPayload int) (frameHeader, error) {
	if len(b) < frameHeaderSize {
		return frameHeader{}, fmt.Errorf("%w: short frame header (%d bytes)", errProtocol, len(b))
	}
	h := frameHeader{
		stream: binary.BigEndian.Uint32(b[0:4]),
		typ:    b[4],
		flags:  b[5],
		length: binary.BigEndian.Uint32(b[6:10]),
	}
	if h.typ < frameRequest || h.typ > frameHeartbeat {
		return h, fmt.Errorf("%w: unknown frame type %d", errProtocol, h.typ)
	}
	if uint64(h.length) > uint64(maxPayload) {
		return h, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d bytes", errProtocol, h.length, maxPayload)
	}
	switch h.typ {
	case frameEnd, frameCancel, frameHeartbeat:
		if h.length != 0 {
			return h, fmt.Errorf("%w: frame type %d with %d payload bytes", errProtocol, h.typ, h.length)
		}
	case frameCredit:
		if h.length != 4 {
			return h, fmt.Errorf("%w: credit frame of %d bytes", errProtocol, h.length)
		}
	}
	return h, nil
}

// readFrame reads one frame from r into a freshly allocated payload, which
// the caller may keep.
func readFrame(r io.Reader, hdr []byte, maxPayload int) (frameHeader, []byte, error) {
	if _, err := io.ReadFull(r, hdr[:frameHeaderSize]); err != nil {
		return frameHeader{}, nil, err
	}
	h, err := parseFrameHeader(hdr, maxPayload)
	if err != nil {
		return h, nil, err
	}
	if h.length == 0 {
		return h, nil, nil
	}
	p := make([]byte, h.length)
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, err
	}
	return h, p, nil
}

// requestBodySize is the encoded size of a request body.
func requestBodySize(endpoint string, headers Headers, payload []byte) int {
	n := 2 + len(endpoint) + 2
	for k, v := range headers {
		n += 4 + len(k) + len(v)
	}
	return n + len(payload)
}

// checkRequestMeta rejects endpoint names and headers the encoding cannot
// carry.
func checkRequestMeta(endpoint string, headers Headers) error {
	if endpoint == "" {
		return errors.New("transport: empty endpoint name")
	}
	n := len(endpoint)
	if len(headers) > 0xffff {
		return fmt.Errorf("transport: %d headers, more than 65535", len(headers))
	}
	for k, v := range headers {
		if len(k) > 0xffff || len(v) > 0xffff {
			return fmt.Errorf("transport: header %.32q longer than 65535 bytes", k)
		}
		n += len(k) + len(v)
	}
	if n > maxHeaderBytes {
		return fmt.Errorf("transport: endpoint and headers take %d bytes, more than %d", n, maxHeaderBytes)
	}
	return nil
}

// appendRequestBody encodes endpoint, headers and payload:
//
//	uint16 endpoint length, endpoint
//	uint16 header count, then per header uint16 key length, key, uint16 value length, value
//	payload (the rest)
func appendRequestBody(b []byte, endpoint string, headers Headers, payload []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(endpoint)))
	b = append(b, endpoint...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(headers)))
	for k, v := range headers {
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
		b = append(b, v...)
	}
	return append(b, payload...)
}

// parseRequestBody decodes a request body. The returned payload aliases b.
func parseRequestBody(b []byte) (*Request, error) {
	rd := byteReader{b: b}
	ep, ok := rd.str16()
	if !ok || ep == "" {
		return nil, fmt.Errorf("%w: bad endpoint in request", errProtocol)
	}
	n, ok := rd.u16()
	if !ok {
		return nil, fmt.Errorf("%w: truncated request headers", errProtocol)
	}
	h := make(Headers, n)
	for range n {
		k, ok1 := rd.str16()
		v, ok2 := rd.str16()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: truncated request header", errProtocol)
		}
		h[k] = v
	}
	return &Request{Endpoint: ep, Headers: h, Payload: rd.b}, nil
}

// appendErrorBody encodes a *HandlerError: uint16 code length, code, message.
func appendErrorBody(b []byte, e *HandlerError) []byte {
	code := e.Code
	if len(code) > 0xffff {
		code = code[:0xffff]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(code)))
	b = append(b, code...)
	return append(b, e.Message...)
}

// parseErrorBody decodes an error body.
func parseErrorBody(b []byte) (*HandlerError, error) {
	rd := byteReader{b: b}
	code, ok := rd.str16()
	if !ok {
		return nil, fmt.Errorf("%w: bad error frame", errProtocol)
	}
	return &HandlerError{Code: code, Message: string(rd.b)}, nil
}

type byteReader struct{ b []byte }

func (r *byteReader) u16() (int, bool) {
	if len(r.b) < 2 {
		return 0, false
	}
	n := int(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return n, true
}

func (r *byteReader) str16() (string, bool) {
	n, ok := r.u16()
	if !ok || len(r.b) < n {
		return "", false
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s, true
}
