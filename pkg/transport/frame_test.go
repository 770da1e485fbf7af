package transport

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFrameRoundTrip(t *testing.T) {
	headers := Headers{HeaderRequestID: "abc", HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	body := appendRequestBody(nil, "generate", headers, []byte{1, 2, 3})
	if len(body) != requestBodySize("generate", headers, []byte{1, 2, 3}) {
		t.Fatalf("requestBodySize = %d, encoded %d", requestBodySize("generate", headers, []byte{1, 2, 3}), len(body))
	}
	var buf bytes.Buffer
	buf.Write(appendFrameHeader(nil, frameHeader{stream: 42, typ: frameRequest, length: uint32(len(body))}))
	buf.Write(body)
	var hdr [frameHeaderSize]byte
	h, p, err := readFrame(&buf, hdr[:], 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if h.stream != 42 || h.typ != frameRequest {
		t.Fatalf("header %+v", h)
	}
	req, err := parseRequestBody(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &Request{Endpoint: "generate", Headers: headers, Payload: []byte{1, 2, 3}}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Fatalf("request (-want +got):\n%s", diff)
	}
}

func TestFrameHeaderRejects(t *testing.T) {
	tests := []struct {
		name string
		h    frameHeader
	}{
		{"unknown type", frameHeader{typ: 99}},
		{"zero type", frameHeader{typ: 0}},
		{"too long", frameHeader{typ: frameData, length: 1<<20 + 1}},
		{"end with payload", frameHeader{typ: frameEnd, length: 1}},
		{"short credit", frameHeader{typ: frameCredit, length: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseFrameHeader(appendFrameHeader(nil, tt.h), 1<<20); !errors.Is(err, errProtocol) {
				t.Fatalf("got %v, want a protocol error", err)
			}
		})
	}
}

func TestCheckRequestMeta(t *testing.T) {
	if err := checkRequestMeta("", nil); err == nil {
		t.Error("empty endpoint accepted")
	}
	if err := checkRequestMeta("e", Headers{"k": string(make([]byte, 70000))}); err == nil {
		t.Error("70 kB header accepted")
	}
	if err := checkRequestMeta("generate", Headers{"k": "v"}); err != nil {
		t.Error(err)
	}
}

func TestHandlerErrorIs(t *testing.T) {
	tests := []struct {
		code   string
		target error
	}{
		{CodeTooLarge, ErrTooLarge},
		{CodeDraining, ErrDraining},
		{CodeNoHandler, ErrNoHandler},
		{CodeTimeout, ErrTimeout},
		{CodeDisconnected, ErrDisconnected},
	}
	for _, tt := range tests {
		if !errors.Is(&HandlerError{Code: tt.code}, tt.target) {
			t.Errorf("code %q is not %v", tt.code, tt.target)
		}
	}
	if errors.Is(&HandlerError{Code: "invalid_argument"}, ErrTooLarge) {
		t.Error("an application code matched a sentinel")
	}
	if he := toHandlerError(tooLarge("x", 2, 1)); he.Code != CodeTooLarge {
		t.Errorf("toHandlerError(too large) code %q", he.Code)
	}
	if he := toHandlerError(errors.New("boom")); he.Code != CodeUnknown || he.Message != "boom" {
		t.Errorf("toHandlerError(boom) = %+v", he)
	}
}
