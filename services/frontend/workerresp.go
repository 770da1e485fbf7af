package frontend

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// A worker answers a generation with a stream of GenerateResponse messages,
// a few tokens each. proto.Unmarshal allocates every message's token slice
// and its usage anew, by reflection; decodeGenerateResponse reads the
// fields the frontend uses straight from the wire into a genResponse whose
// token buffer is reused from message to message. A message it does not
// take (log probabilities, a field of an unexpected wire type, anything
// malformed) is decoded by proto.Unmarshal, which gives the same values or
// its error (FuzzDecodeGenerateResponse checks both against each other).

// Field numbers of GenerateResponse and Usage (worker.proto).
const (
	respTokenIDs     = 1
	respText         = 2
	respFinishReason = 3
	respUsage        = 4
	respErrorMessage = 5
	// respPromptLogprobs, like the generated tokens' logprobs (6), is
	// decoded by proto.Unmarshal: it comes once per request, when asked.
	respPromptLogprobs = 8
	usageCached        = 3
)

// genResponse is what the frontend reads of a GenerateResponse.
type genResponse struct {
	// tokenIDs are valid until the next decode.
	tokenIDs []uint32
	finish   workerv1.FinishReason
	// hasUsage says the message carried usage; cached is its
	// cached_prompt_tokens.
	hasUsage bool
	cached   uint32
	errMsg   string
	logprobs []*workerv1.TokenLogprob
	// promptLogprobs are the prompt's, on the first response of a request
	// that asked for them.
	promptLogprobs []*workerv1.TokenLogprob
}

// decode reads b into r, by hand when it can and with proto.Unmarshal
// otherwise; the error is proto.Unmarshal's.
func (r *genResponse) decode(b []byte) error {
	if r.decodeFast(b) {
		return nil
	}
	var m workerv1.GenerateResponse
	if err := proto.Unmarshal(b, &m); err != nil {
		return err
	}
	u := m.GetUsage()
	*r = genResponse{tokenIDs: m.TokenIds, finish: m.FinishReason, hasUsage: u != nil, cached: u.GetCachedPromptTokens(),
		errMsg: m.ErrorMessage, logprobs: m.Logprobs, promptLogprobs: m.PromptLogprobs}
	return nil
}

// decodeFast decodes b as proto.Unmarshal would, or reports false.
func (r *genResponse) decodeFast(b []byte) bool {
	ids := r.tokenIDs[:0]
	*r = genResponse{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber {
			return false
		}
		b = b[n:]
		switch {
		case num == respTokenIDs && typ == protowire.BytesType:
			packed, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			var ok bool
			if ids, ok = appendVarints(ids, packed); !ok {
				return false
			}
			b = b[n:]
		case num == respTokenIDs && typ == protowire.VarintType:
			// One id unpacked: a parser takes both forms, even mixed.
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			ids = append(ids, uint32(v))
			b = b[n:]
		case num == respFinishReason && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			r.finish = workerv1.FinishReason(int32(v))
			b = b[n:]
		case (num == respText || num == respErrorMessage) && typ == protowire.BytesType:
			s, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(s) { // proto3 strings must be UTF-8
				return false
			}
			if num == respErrorMessage {
				r.errMsg = string(s)
			}
			b = b[n:]
		case num == respUsage && typ == protowire.BytesType:
			u, n := protowire.ConsumeBytes(b)
			if n < 0 || !r.usage(u) {
				return false
			}
			r.hasUsage = true
			b = b[n:]
		case (num >= respTokenIDs && num <= 6) || num == respPromptLogprobs:
			// Log probabilities, or a known field of another wire type
			// (which proto.Unmarshal keeps as unknown): its way.
			return false
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	r.tokenIDs = ids
	return true
}

// appendVarints appends the packed varints of b to ids as token ids; ok is
// false when b ends inside one.
func appendVarints(ids []uint32, b []byte) (_ []uint32, ok bool) {
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return ids, false
		}
		ids = append(ids, uint32(v))
		b = b[n:]
	}
	return ids, true
}

// usage reads a Usage message's cached_prompt_tokens; several usage fields
// merge, as proto.Unmarshal merges them (the last value of a field wins).
func (r *genResponse) usage(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber {
			return false
		}
		b = b[n:]
		switch {
		case num >= 1 && num <= 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			if num == usageCached {
				r.cached = uint32(v)
			}
			b = b[n:]
		case num >= 1 && num <= 3:
			return false
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}
