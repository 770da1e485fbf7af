package simengine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

func TestStopTokens(t *testing.T) {
	tests := []struct {
		name      string
		minTokens int
	}{
		{"no minimum", 0},
		{"minimum 5", 5},
		{"minimum 12", 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Two output tokens only, so the stop token comes soon.
			e := newEngine(t, func(c *Config) { c.OutputTokenMin, c.OutputTokenMax = 100, 102 })
			req := Request{ID: "a", Prompt: prompt(1, 6), MaxTokens: 40, StopTokenIDs: []uint32{100}, MinTokens: tt.minTokens}
			if err := e.Add(req); err != nil {
				t.Fatal(err)
			}
			d := drain(t, e, 100)
			toks := d.tokens["a"]
			// The reference: the first 100 at or after the minimum.
			var want []uint32
			for pos := range 40 {
				tok := outputToken(tokenSeed(req.Prompt, 0), pos, 100, 102)
				want = append(want, tok)
				if tok == 100 && pos+1 >= tt.minTokens {
					break
				}
			}
			if !slices.Equal(toks, want) {
				t.Fatalf("tokens %v, want %v", toks, want)
			}
			wantFinish := FinishStop
			if want[len(want)-1] != 100 {
				wantFinish = FinishLength
			}
			if got := d.last["a"].Finish; got != wantFinish {
				t.Errorf("finish %v, want %v", got, wantFinish)
			}
		})
	}
}

func TestRequestFromProto(t *testing.T) {
	seed := uint64(9)
	tests := []struct {
		name    string
		req     *workerv1.GenerateRequest
		want    Request
		wantErr error
	}{
		{"full", &workerv1.GenerateRequest{
			RequestId: "a", TokenIds: []uint32{1, 2}, MaxTokens: 7,
			Sampling: &workerv1.SamplingParameters{Temperature: 0.5, Seed: &seed},
			Stop:     &workerv1.StopConditions{StopTokenIds: []uint32{3}, MinTokens: 2, IgnoreEos: true},
		}, Request{ID: "a", Prompt: []uint32{1, 2}, MaxTokens: 7, Seed: 9, StopTokenIDs: []uint32{3}, MinTokens: 2}, nil},
		{"default max tokens", &workerv1.GenerateRequest{RequestId: "b", TokenIds: []uint32{1}},
			Request{ID: "b", Prompt: []uint32{1}, MaxTokens: 100}, nil},
		{"no id", &workerv1.GenerateRequest{TokenIds: []uint32{1}}, Request{}, ErrInvalidRequest},
		{"no tokens", &workerv1.GenerateRequest{RequestId: "c"}, Request{}, ErrInvalidRequest},
		{"nil", nil, Request{}, ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RequestFromProto(tt.req, 100)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestOutputAndMetricsProto(t *testing.T) {
	out := Output{RequestID: "a", Tokens: []uint32{5}, Finish: FinishStop,
		Usage: Usage{PromptTokens: 10, CompletionTokens: 3, CachedPromptTokens: 8}}
	wantOut := &workerv1.GenerateResponse{
		TokenIds: []uint32{5}, FinishReason: workerv1.FinishReason_FINISH_REASON_STOP,
		Usage: &workerv1.Usage{PromptTokens: 10, CompletionTokens: 3, CachedPromptTokens: 8},
	}
	if diff := cmp.Diff(wantOut, out.Proto(), protocmp.Transform()); diff != "" {
		t.Errorf("Output.Proto (-want +got):\n%s", diff)
	}
	reasons := map[FinishReason]workerv1.FinishReason{
		FinishNone:      workerv1.FinishReason_FINISH_REASON_UNSPECIFIED,
		FinishLength:    workerv1.FinishReason_FINISH_REASON_LENGTH,
		FinishStop:      workerv1.FinishReason_FINISH_REASON_STOP,
		FinishCancelled: workerv1.FinishReason_FINISH_REASON_CANCELLED,
	}
	for r, want := range reasons {
		if got := r.Proto(); got != want {
			t.Errorf("%v.Proto() = %v, want %v", r, got, want)
		}
	}
	at := time.Unix(1700000000, 5)
	m := Metrics{ActiveDecodeBlocks: 1, ActivePrefillTokens: 2, KVBlocksUsed: 3, KVBlocksTotal: 4, CachedBlocks: 9, Waiting: 5, Running: 6,
		Requests: []RequestLoad{{ID: "a", DecodeBlocks: 1}, {ID: "b", PrefillTokens: 2}}}
	timing := DefaultConfig().Timing()
	wantM := &workerv1.LoadMetrics{InstanceId: 7, DpRank: 1, ActiveDecodeBlocks: 1, ActivePrefillTokens: 2,
		KvBlocksUsed: 3, KvBlocksTotal: 4, WaitingRequests: 5, RunningRequests: 6, Timestamp: timestamppb.New(at),
		TimingModel: timing.Proto(),
		Requests:    []*workerv1.RequestLoad{{RequestId: "a", DecodeBlocks: 1}, {RequestId: "b", PrefillTokens: 2}}}
	if diff := cmp.Diff(wantM, m.Proto(7, 1, at, timing), protocmp.Transform()); diff != "" {
		t.Errorf("Metrics.Proto (-want +got):\n%s", diff)
	}
}

func TestBatchProto(t *testing.T) {
	evs := []Event{
		{ID: 4, Kind: EventRemoved, Removed: []uint64{1}},
		{ID: 5, Kind: EventCleared},
	}
	tests := []struct {
		name    string
		events  []Event
		want    *workerv1.KvEventBatch
		wantErr error
	}{
		{"none", nil, nil, nil},
		{"consecutive", evs, &workerv1.KvEventBatch{InstanceId: 3, DpRank: 2, FirstEventId: 4,
			Events: []*workerv1.KvCacheEvent{evs[0].Proto(), evs[1].Proto()}}, nil},
		{"gap", []Event{evs[0], {ID: 6, Kind: EventCleared}}, nil, ErrEventGap},
		{"reordered", []Event{evs[1], evs[0]}, nil, ErrEventGap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BatchProto(3, 2, tt.events)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
