package simengine

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// FuzzRequestFromProto decodes arbitrary bytes as a GenerateRequest, as a
// mocker worker does with request plane payloads. Neither the conversion
// nor the engine may panic; whatever the conversion accepts, the engine
// either rejects with a documented sentinel or runs to completion.
func FuzzRequestFromProto(f *testing.F) {
	for _, r := range []*workerv1.GenerateRequest{
		{RequestId: "a", TokenIds: []uint32{1, 2, 3, 4, 5}, MaxTokens: 3},
		{RequestId: "b", TokenIds: []uint32{7}, Stop: &workerv1.StopConditions{StopTokenIds: []uint32{1000}, MinTokens: 2}},
		{RequestId: "c", TokenIds: make([]uint32, 300), MaxTokens: 1 << 31},
		{RequestId: "d", TokenIds: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, MaxTokens: 2, LoraName: "sql"},
		{},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var pr workerv1.GenerateRequest
		if err := proto.Unmarshal(data, &pr); err != nil {
			return
		}
		req, err := RequestFromProto(&pr, 4)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("RequestFromProto error %v is not ErrInvalidRequest", err)
			}
			return
		}
		e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 256; c.MaxNumBatchedTokens = 64; c.MaxLoras = 1 })
		if err := e.Add(req); err != nil {
			if !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrRequestTooLarge) {
				t.Fatalf("Add error %v is not a documented sentinel", err)
			}
			return
		}
		d := drain(t, e, 2000)
		if n := len(d.tokens[req.ID]); n == 0 || n > req.MaxTokens {
			t.Fatalf("generated %d tokens, max %d", n, req.MaxTokens)
		}
	})
}
