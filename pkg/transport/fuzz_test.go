package transport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzFrameDecoder feeds arbitrary bytes to the tcp plane's frame reader and
// body parsers: they must fail cleanly, never panic or over-allocate.
func FuzzFrameDecoder(f *testing.F) {
	req := appendRequestBody(nil, "generate", Headers{"x-request-id": "r1", "traceparent": "00-1-2-01"}, []byte("payload"))
	f.Add(append(appendFrameHeader(nil, frameHeader{stream: 1, typ: frameRequest, length: uint32(len(req))}), req...))
	f.Add(appendFrameHeader(nil, frameHeader{stream: 7, typ: frameEnd}))
	f.Add(append(appendFrameHeader(nil, frameHeader{stream: 2, typ: frameCredit, length: 4}), 0, 0, 0, 50))
	eb := appendErrorBody(nil, &HandlerError{Code: "x", Message: "boom"})
	f.Add(append(appendFrameHeader(nil, frameHeader{stream: 3, typ: frameError, length: uint32(len(eb))}), eb...))
	f.Add([]byte{0, 0, 0, 1, 2, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 1, 9, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxPayload = 1 << 16
		r := bufio.NewReader(bytes.NewReader(b))
		var hdr [frameHeaderSize]byte
		for {
			h, p, err := readFrame(r, hdr[:], maxPayload)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, errProtocol) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if int(h.length) != len(p) || len(p) > maxPayload {
				t.Fatalf("header length %d, payload %d", h.length, len(p))
			}
			switch h.typ {
			case frameRequest:
				if r, err := parseRequestBody(p); err == nil {
					again := appendRequestBody(nil, r.Endpoint, r.Headers, r.Payload)
					if r2, err := parseRequestBody(again); err != nil || !cmp.Equal(r, r2) {
						t.Fatalf("request does not round-trip: %v", err)
					}
				}
			case frameError:
				if he, err := parseErrorBody(p); err == nil {
					if he2, err := parseErrorBody(appendErrorBody(nil, he)); err != nil || *he2 != *he {
						t.Fatalf("error body does not round-trip: %v", err)
					}
				}
			}
		}
	})
}

// FuzzHTTPRequestParsing checks the http plane's request validation.
func FuzzHTTPRequestParsing(f *testing.F) {
	f.Add("POST", "/v1/rpc/generate", "Dyn-Hdr-X-Request-Id", "r1", int64(5))
	f.Add("GET", "/v1/rpc/generate", "Content-Type", "x", int64(0))
	f.Add("POST", "/v1/rpc/", "Dyn-Hdr-", "", int64(-1))
	f.Add("POST", "/v1/rpc/a/b", "dyn-hdr-traceparent", "00", int64(1<<40))
	f.Add("POST", "/v1/rpcgenerate", "", "", int64(0))
	f.Fuzz(func(t *testing.T, method, path, name, value string, contentLength int64) {
		const root, maxSize = "/v1/rpc", 1 << 20
		h := http.Header{}
		h[name] = []string{value}
		ep, hdrs, perr := parseHTTPRequest(root, method, path, h, contentLength, maxSize)
		if perr != nil {
			if perr.status < 400 || perr.he == nil {
				t.Fatalf("rejection without an error status: %+v", perr)
			}
			return
		}
		if method != http.MethodPost || contentLength > maxSize {
			t.Fatalf("accepted method %q, content length %d", method, contentLength)
		}
		if ep == "" || strings.Contains(ep, "/") || path != root+"/"+ep {
			t.Fatalf("endpoint %q from path %q", ep, path)
		}
		for k := range hdrs {
			if k != strings.ToLower(k) {
				t.Fatalf("header key %q not lower-case", k)
			}
		}
		if err := checkRequestMeta(ep, hdrs); err != nil {
			t.Fatalf("accepted request the wire cannot carry: %v", err)
		}
	})
}

// FuzzAddressJSON: an address in JSON is a one-key object of a known plane.
// UnmarshalJSON refuses every other shape, never panics, and an address it
// reads marshals and reads back to itself.
func FuzzAddressJSON(f *testing.F) {
	f.Add([]byte(`{"tcp":"127.0.0.1:1"}`))
	f.Add([]byte(`{"http":"http://h:1/v1/rpc","tcp":"x"}`))
	f.Add([]byte(`{"NATS":"s"}`))
	f.Add([]byte(`{"nats":""}`))
	f.Add([]byte(`["tcp"]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var a Address
		if err := a.UnmarshalJSON(data); err != nil {
			return
		}
		out, err := a.MarshalJSON()
		if err != nil {
			t.Fatalf("address %v read from %q does not marshal: %v", a, data, err)
		}
		var back Address
		if err := back.UnmarshalJSON(out); err != nil || back != a {
			t.Fatalf("address %v marshals to %s, which reads back as %v, %v", a, out, back, err)
		}
	})
}
