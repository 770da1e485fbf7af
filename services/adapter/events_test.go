package adapter

import (
	"errors"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
)

// pack encodes v as msgspec encodes vLLM's structs with array_like=True and
// tag=True: arrays, the tag first.
func pack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func toks(n, base int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

func u32s(n, base int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(base + i)
	}
	return out
}

func TestDecodeBatch(t *testing.T) {
	big := uint64(math.MaxUint64 - 5)
	tests := []struct {
		name    string
		payload []any
		want    Batch
		wantErr string
	}{
		{name: "stored with signed hashes, no parent, unknown trailing fields",
			payload: []any{1.5, []any{[]any{"BlockStored", []any{int64(-7), big}, nil, toks(8, 100), 4, nil, "GPU", nil, "extra", 42}}, nil},
			want: Batch{Timestamp: 1.5, Events: []Event{{Kind: BlockStored, BlockHashes: []uint64{uint64(math.MaxUint64 - 6), big},
				TokenIDs: u32s(8, 100), BlockSize: 4, Medium: "GPU"}}}},
		{name: "stored with parent, old layout without medium",
			payload: []any{int64(2), []any{[]any{"BlockStored", []any{3}, int64(-1), toks(4, 0), 4, nil}}, 1},
			want: Batch{Timestamp: 2, DPRank: 1, HasDPRank: true, Events: []Event{{Kind: BlockStored, BlockHashes: []uint64{3},
				Parent: math.MaxUint64, HasParent: true, TokenIDs: u32s(4, 0), BlockSize: 4}}}},
		{name: "lora and cpu medium",
			payload: []any{0.0, []any{[]any{"BlockStored", []any{3}, nil, toks(4, 0), 4, 9, "CPU"}}},
			want:    Batch{Events: []Event{{Kind: BlockStored, BlockHashes: []uint64{3}, TokenIDs: u32s(4, 0), BlockSize: 4, HasLoRA: true, Medium: "CPU"}}}},
		{name: "removed and cleared, unknown event ignored",
			payload: []any{0.0, []any{[]any{"BlockRemoved", []any{int64(-2), 5}, nil, "more"}, []any{"SomethingNew", 1}, []any{"AllBlocksCleared"}}, nil},
			want:    Batch{Events: []Event{{Kind: BlockRemoved, BlockHashes: []uint64{math.MaxUint64 - 1, 5}}, {Kind: AllBlocksCleared}}}},
		{name: "byte-string hashes", payload: []any{0.0, []any{[]any{"BlockRemoved", []any{[]byte{1, 2}}}}},
			want: Batch{Events: []Event{{Kind: BlockRemoved, BlockHashes: []uint64{hashOfMust([]byte{1, 2})}}}}},
		{name: "not an array", payload: nil, wantErr: "not an array"},
		{name: "events not an array", payload: []any{0.0, "x"}, wantErr: "events"},
		{name: "bad timestamp", payload: []any{"now", []any{}}, wantErr: "timestamp"},
		{name: "negative token", payload: []any{0.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1}}}, wantErr: "token id"},
		{name: "float hash", payload: []any{0.0, []any{[]any{"BlockRemoved", []any{1.5}}}}, wantErr: "block hash"},
		{name: "short stored", payload: []any{0.0, []any{[]any{"BlockStored", []any{1}}}}, wantErr: "fields"},
		{name: "zero block size", payload: []any{0.0, []any{[]any{"BlockStored", []any{1}, nil, []any{}, 0}}}, wantErr: "block_size"},
		{name: "untagged event", payload: []any{0.0, []any{[]any{1, 2}}}, wantErr: "tag"},
		{name: "bad medium", payload: []any{0.0, []any{[]any{"BlockRemoved", []any{1}, 3}}}, wantErr: "medium"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw any = tt.payload
			if tt.payload == nil {
				raw = map[string]any{"a": 1}
			}
			got, err := DecodeBatch(pack(t, raw))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrMalformed with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := DecodeBatch([]byte{0x93, 0xcb}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated payload: %v", err)
	}
}

func hashOfMust(b []byte) uint64 {
	h, err := hashOf(b)
	if err != nil {
		panic(err)
	}
	return h
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(pack(f, []any{1.0, []any{[]any{"BlockStored", []any{int64(-7), 2}, nil, toks(8, 1), 4, nil, "GPU", "x"}}, nil}))
	f.Add(pack(f, []any{1.0, []any{[]any{"BlockRemoved", []any{int64(-7)}, nil}, []any{"AllBlocksCleared"}}, 0}))
	for _, m := range []any{"CPU", "cpu", "CPU_TIER1", "CPU_TIER2", "disk", "nvme-remote", ""} {
		f.Add(pack(f, []any{1.0, []any{
			[]any{"BlockStored", []any{1, 2}, nil, toks(8, 1), 4, nil, "GPU"},
			[]any{"BlockStored", []any{2}, 1, toks(4, 5), 4, nil, m},
			[]any{"BlockRemoved", []any{2}, "GPU"},
			[]any{"BlockRemoved", []any{2}, m},
		}, nil}))
	}
	f.Add([]byte{})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := DecodeBatch(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		tr := NewTranslator(4, 16, slog.New(slog.DiscardHandler), &Stats{})
		out := tr.Translate(b)
		// Every published event carries the medium its engine event named.
		var media []workerv1.KvMedium
		for _, e := range b.Events {
			media = append(media, MediumOf(e.Medium))
		}
		for _, ev := range out.GetEvents() {
			var m workerv1.KvMedium
			switch k := ev.GetEvent().(type) {
			case *workerv1.KvCacheEvent_Stored:
				m = k.Stored.GetMedium()
			case *workerv1.KvCacheEvent_Removed:
				m = k.Removed.GetMedium()
			default:
				continue
			}
			if !slices.Contains(media, m) {
				t.Fatalf("published medium %v, the engine named %v", m, media)
			}
			if _, ok := workerv1.KvMedium_name[int32(m)]; !ok {
				t.Fatalf("published medium %d outside the enum", m)
			}
		}
	})
}

func TestTranslator(t *testing.T) {
	stats := &Stats{}
	tr := NewTranslator(4, 1024, slog.New(slog.DiscardHandler), stats)
	tokens := u32s(16, 500)
	want := kvhash.Hashes(tokens, 4, nil)
	tr.Sequence(1)
	// Two messages, the second chained to the first by the engine's hash.
	b1 := tr.Translate(Batch{Events: []Event{{Kind: BlockStored, BlockHashes: []uint64{math.MaxUint64, 11}, TokenIDs: tokens[:8], BlockSize: 4}}})
	tr.Sequence(2)
	b2 := tr.Translate(Batch{Events: []Event{{Kind: BlockStored, BlockHashes: []uint64{12, 13}, Parent: 11, HasParent: true, TokenIDs: tokens[8:], BlockSize: 4, Medium: "GPU"}}})
	if b1.FirstEventId != 1 || b2.FirstEventId != 2 {
		t.Fatalf("event ids %d, %d", b1.FirstEventId, b2.FirstEventId)
	}
	var got []kvhash.Block
	for _, b := range []*workerv1.KvEventBatch{b1, b2} {
		for _, blk := range b.Events[0].GetStored().Blocks {
			got = append(got, kvhash.Block{Local: blk.LocalHash, Sequence: blk.SequenceHash})
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("blocks %v, want %v", got, want)
	}
	if p := b2.Events[0].GetStored().ParentSequenceHash; p == nil || *p != want[1].Sequence {
		t.Fatalf("parent %v, want %x", p, want[1].Sequence)
	}
	// A gap, a wrong block size, an unknown parent and an unknown removal
	// publish nothing but are counted.
	tr.Sequence(5)
	if b := tr.Translate(Batch{Events: []Event{
		{Kind: BlockStored, BlockHashes: []uint64{20}, TokenIDs: u32s(8, 0), BlockSize: 8},
		{Kind: BlockStored, BlockHashes: []uint64{22}, Parent: 99, HasParent: true, TokenIDs: u32s(4, 0), BlockSize: 4},
		{Kind: BlockStored, BlockHashes: []uint64{23}, TokenIDs: u32s(4, 0), BlockSize: 4, HasLoRA: true},
		{Kind: BlockRemoved, BlockHashes: []uint64{98}},
	}}); b != nil {
		t.Fatalf("published %v", b)
	}
	if stats.Gaps.Load() != 1 || stats.LostMessages.Load() != 2 || stats.BlockSizeMismatches.Load() != 1 || stats.Skipped.Load() != 2 || stats.UnknownRemovals.Load() != 1 {
		t.Fatalf("stats gaps=%d lost=%d mismatches=%d skipped=%d unknown=%d", stats.Gaps.Load(), stats.LostMessages.Load(),
			stats.BlockSizeMismatches.Load(), stats.Skipped.Load(), stats.UnknownRemovals.Load())
	}
	// A removal resolves to the Switchyard hash; cleared forgets everything.
	b := tr.Translate(Batch{Events: []Event{{Kind: BlockRemoved, BlockHashes: []uint64{13, 13}}, {Kind: AllBlocksCleared}, {Kind: BlockRemoved, BlockHashes: []uint64{12}}}})
	if r := tr.Translate(Batch{DPRank: 2, HasDPRank: true, Events: []Event{{Kind: AllBlocksCleared}}}); r.DpRank != 2 || r.FirstEventId != 1 {
		t.Fatalf("rank 2 batch %v", r)
	}
	// The sequence going back is an engine restart: the blocks are gone.
	tr.Sequence(1)
	if r := tr.Translate(Batch{Events: []Event{{Kind: BlockRemoved, BlockHashes: []uint64{11}}}}); r.FirstEventId != 5 || len(r.Events) != 1 ||
		r.Events[0].GetCleared() == nil || stats.Restarts.Load() != 1 || len(tr.blocks) != 0 {
		t.Fatalf("after a restart %v", r)
	}
	if b.FirstEventId != 3 || len(b.Events) != 2 || !reflect.DeepEqual(b.Events[0].GetRemoved().SequenceHashes, []uint64{want[3].Sequence}) || b.Events[1].GetCleared() == nil {
		t.Fatalf("batch %v", b)
	}
}

func TestTranslatorForgetsTheOldest(t *testing.T) {
	tr := NewTranslator(1, 3, slog.New(slog.DiscardHandler), &Stats{})
	for i := range 10 {
		tr.Translate(Batch{Events: []Event{{Kind: BlockStored, BlockHashes: []uint64{uint64(i)}, TokenIDs: []uint32{uint32(i)}, BlockSize: 1}}})
	}
	if len(tr.blocks) != 3 {
		t.Fatalf("%d blocks remembered", len(tr.blocks))
	}
	for _, h := range []uint64{7, 8, 9} {
		if _, ok := tr.blocks[h]; !ok {
			t.Fatalf("block %d forgotten", h)
		}
	}
}

func TestParseLoad(t *testing.T) {
	m := ParseLoad(strings.NewReader(`# HELP vllm:num_requests_waiting x
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:cache_config_info{block_size="16",num_gpu_blocks="2048",swap_space="4"} 1.0
other_metric 7
`))
	if m.WaitingRequests != 3 || m.RunningRequests != 2 || m.KvBlocksTotal != 2048 || m.KvBlocksUsed != 512 {
		t.Fatalf("load %v", m)
	}
	if m := ParseLoad(strings.NewReader("vllm:gpu_cache_usage_perc 0.5\n")); m.KvBlocksTotal != usageScale || m.KvBlocksUsed != usageScale/2 {
		t.Fatalf("load %v", m)
	}
	sglang := ParseLoad(strings.NewReader(`# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.28
sglang:num_queue_reqs{model_name="m"} 4.0
sglang:num_running_reqs{model_name="m"} 6.0
`))
	if sglang.WaitingRequests != 4 || sglang.RunningRequests != 6 || sglang.KvBlocksUsed != 280 || sglang.KvBlocksTotal != usageScale {
		t.Fatalf("SGLang load %v", sglang)
	}
}

// TestMediumOf maps the engines' medium strings: vLLM's "GPU" and "CPU",
// LMCache's "cpu", SGLang HiCache's "CPU_TIER1" and "CPU_TIER2", none
// (an engine that predates media) and a medium nobody knows.
func TestMediumOf(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want workerv1.KvMedium
	}{
		{"", workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED},
		{"GPU", workerv1.KvMedium_KV_MEDIUM_GPU},
		{"gpu", workerv1.KvMedium_KV_MEDIUM_GPU},
		{"CPU", workerv1.KvMedium_KV_MEDIUM_CPU},
		{"cpu", workerv1.KvMedium_KV_MEDIUM_CPU},
		{"CPU_TIER1", workerv1.KvMedium_KV_MEDIUM_CPU},
		{"CPU_TIER2", workerv1.KvMedium_KV_MEDIUM_DISK},
		{"DISK", workerv1.KvMedium_KV_MEDIUM_DISK},
		{"disk", workerv1.KvMedium_KV_MEDIUM_DISK},
		{"nvme-remote", workerv1.KvMedium_KV_MEDIUM_UNKNOWN},
		{"GPU ", workerv1.KvMedium_KV_MEDIUM_UNKNOWN},
	} {
		if got := MediumOf(tt.in); got != tt.want {
			t.Errorf("MediumOf(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestTranslatorMedia follows vLLM's offloading through the translator:
// blocks stored on GPU, offloaded (stored on CPU: the same engine hashes),
// evicted from GPU, then from CPU. Each published event names its medium
// and resolves to the blocks' Switchyard hashes; a removal from one medium
// keeps the mapping the removal from the other needs.
func TestTranslatorMedia(t *testing.T) {
	stats := &Stats{}
	tr := NewTranslator(4, 1024, slog.New(slog.DiscardHandler), stats)
	tokens := u32s(8, 500)
	want := kvhash.Hashes(tokens, 4, nil)
	seqs := []uint64{want[0].Sequence, want[1].Sequence}
	b := tr.Translate(Batch{Events: []Event{
		{Kind: BlockStored, BlockHashes: []uint64{1, 2}, TokenIDs: tokens, BlockSize: 4, Medium: "GPU"},
		{Kind: BlockStored, BlockHashes: []uint64{1, 2}, TokenIDs: tokens, BlockSize: 4, Medium: "CPU"},
		{Kind: BlockRemoved, BlockHashes: []uint64{1, 2}, Medium: "GPU"},
		{Kind: BlockRemoved, BlockHashes: []uint64{1, 2}, Medium: "CPU"},
		{Kind: BlockStored, BlockHashes: []uint64{3}, Parent: 2, HasParent: true, TokenIDs: u32s(4, 9), BlockSize: 4, Medium: "LocalDiskBackend"},
	}})
	wantMedia := []workerv1.KvMedium{workerv1.KvMedium_KV_MEDIUM_GPU, workerv1.KvMedium_KV_MEDIUM_CPU,
		workerv1.KvMedium_KV_MEDIUM_GPU, workerv1.KvMedium_KV_MEDIUM_CPU, workerv1.KvMedium_KV_MEDIUM_UNKNOWN}
	if len(b.GetEvents()) != len(wantMedia) {
		t.Fatalf("published %v", b)
	}
	for i, ev := range b.Events {
		var m workerv1.KvMedium
		var hs []uint64
		if st := ev.GetStored(); st != nil {
			m = st.Medium
			for _, blk := range st.Blocks {
				hs = append(hs, blk.SequenceHash)
			}
		} else {
			m, hs = ev.GetRemoved().GetMedium(), ev.GetRemoved().GetSequenceHashes()
		}
		if m != wantMedia[i] {
			t.Errorf("event %d on %v, want %v", i, m, wantMedia[i])
		}
		if i < 4 && !reflect.DeepEqual(hs, seqs) {
			t.Errorf("event %d names %x, want %x", i, hs, seqs)
		}
	}
	if stats.UnknownRemovals.Load() != 0 || stats.Skipped.Load() != 0 {
		t.Fatalf("unknown removals %d, skipped %d", stats.UnknownRemovals.Load(), stats.Skipped.Load())
	}
}
