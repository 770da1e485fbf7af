package frontend

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

func generateResponseSeeds(t testing.TB) [][]byte {
	text := "é"
	var seeds [][]byte
	for _, m := range []*workerv1.GenerateResponse{
		{},
		{TokenIds: []uint32{1, 200, 70000, 4294967295}},
		{TokenIds: []uint32{7}, Usage: &workerv1.Usage{PromptTokens: 20, CompletionTokens: 1, CachedPromptTokens: 16}},
		{FinishReason: workerv1.FinishReason_FINISH_REASON_LENGTH, Usage: &workerv1.Usage{}},
		{FinishReason: workerv1.FinishReason_FINISH_REASON_ERROR, ErrorMessage: "engine failed"},
		{TokenIds: []uint32{3}, Text: &text},
		{TokenIds: []uint32{3}, Logprobs: []*workerv1.TokenLogprob{{Logprob: -0.5, Top: []*workerv1.TopLogprob{{TokenId: 3, Logprob: -0.5}}}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	// Unpacked ids, two usage fields that merge, an unknown field, an
	// enum out of range, a known field of another wire type, a bad UTF-8
	// string, truncations.
	var b []byte
	b = protowire.AppendTag(b, respTokenIDs, protowire.VarintType)
	b = protowire.AppendVarint(b, 5)
	b = protowire.AppendTag(b, respTokenIDs, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<40)
	b = protowire.AppendTag(b, respUsage, protowire.BytesType)
	b = protowire.AppendBytes(b, protowire.AppendVarint(protowire.AppendTag(nil, usageCached, protowire.VarintType), 9))
	b = protowire.AppendTag(b, respUsage, protowire.BytesType)
	b = protowire.AppendBytes(b, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 4))
	b = protowire.AppendTag(b, 99, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 1)
	b = protowire.AppendTag(b, respFinishReason, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<33+2)
	seeds = append(seeds, b)
	seeds = append(seeds, protowire.AppendFixed32(protowire.AppendTag(nil, respFinishReason, protowire.Fixed32Type), 1))
	seeds = append(seeds, protowire.AppendBytes(protowire.AppendTag(nil, respErrorMessage, protowire.BytesType), []byte{0xff}))
	seeds = append(seeds, protowire.AppendTag(nil, 100, protowire.StartGroupType))
	seeds = append(seeds, []byte{0x0a, 0x05, 0x01})
	return seeds
}

// FuzzDecodeGenerateResponse checks genResponse's hand decoder against
// proto.Unmarshal: what it takes, proto.Unmarshal takes too and reads the
// same; the reused token buffer never leaks a previous message's ids.
func FuzzDecodeGenerateResponse(f *testing.F) {
	for _, s := range generateResponseSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// A buffer with capacity and stale ids, as after an earlier message.
		r := genResponse{tokenIDs: []uint32{11, 12, 13, 14, 15, 16, 17, 18}[:8]}
		var m workerv1.GenerateResponse
		perr := proto.Unmarshal(b, &m)
		fast := r.decodeFast(b)
		if fast && perr != nil {
			t.Fatalf("the hand decoder took %x, which proto.Unmarshal refuses: %v", b, perr)
		}
		if err := r.decode(b); (err != nil) != (perr != nil) {
			t.Fatalf("%x: decode error %v, proto %v", b, err, perr)
		}
		if perr != nil {
			return
		}
		if !slices.Equal(r.tokenIDs, m.TokenIds) || r.finish != m.FinishReason || r.hasUsage != (m.Usage != nil) ||
			r.cached != m.GetUsage().GetCachedPromptTokens() || r.errMsg != m.ErrorMessage || len(r.logprobs) != len(m.Logprobs) {
			t.Fatalf("%x (fast %v): got %+v, proto %v", b, fast, r, &m)
		}
	})
}

// TestDecodeGenerateResponseFast: what the mocker and the SDK send takes
// the hand decoder, reusing the token buffer; log probabilities take
// proto.Unmarshal.
func TestDecodeGenerateResponseFast(t *testing.T) {
	seeds := generateResponseSeeds(t)
	var r genResponse
	for i, want := range []bool{true, true, true, true, true, true, false} {
		if got := r.decodeFast(seeds[i]); got != want {
			t.Errorf("seed %d: taken %v, want %v", i, got, want)
		}
	}
	r = genResponse{tokenIDs: make([]uint32, 0, 8)}
	buf := &r.tokenIDs[:1][0]
	if err := r.decode(seeds[1]); err != nil || &r.tokenIDs[0] != buf {
		t.Fatalf("the token buffer was not reused (err %v)", err)
	}
	if err := r.decode(seeds[6]); err != nil || len(r.logprobs) != 1 || !slices.Equal(r.tokenIDs, []uint32{3}) {
		t.Fatalf("logprobs message decoded as %+v (err %v)", r, err)
	}
}

// BenchmarkDecodeGenerateResponse reads a mocker-like message (a few
// tokens and usage) by hand and, as before, with proto.Unmarshal.
func BenchmarkDecodeGenerateResponse(b *testing.B) {
	msg, err := proto.Marshal(&workerv1.GenerateResponse{TokenIds: []uint32{1820, 13, 576},
		Usage: &workerv1.Usage{PromptTokens: 20, CompletionTokens: 3, CachedPromptTokens: 16}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var r genResponse
		for b.Loop() {
			if err := r.decode(msg); err != nil || len(r.tokenIDs) != 3 {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		var m workerv1.GenerateResponse
		for b.Loop() {
			m.Reset()
			if err := proto.Unmarshal(msg, &m); err != nil || len(m.TokenIds) != 3 {
				b.Fatal(err)
			}
		}
	})
}
