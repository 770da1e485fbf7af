package adapter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zeebo/xxh3"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// EventKind says what a decoded engine KV event is.
type EventKind int

// The engine KV event kinds.
const (
	// BlockStored: full blocks entered the cache.
	BlockStored EventKind = iota + 1
	// BlockRemoved: blocks left the cache.
	BlockRemoved
	// AllBlocksCleared: the whole cache was reset.
	AllBlocksCleared
)

// Event is one engine KV cache event, as vLLM publishes it.
type Event struct {
	Kind EventKind
	// BlockHashes are the engine's own block hashes (signed 64-bit ones as
	// their two's complement bits; byte-string ones folded with xxh3).
	BlockHashes []uint64
	// Parent is the engine hash of the block before the first stored one.
	Parent    uint64
	HasParent bool
	// TokenIDs are the stored blocks' tokens, len(BlockHashes)*BlockSize.
	TokenIDs []uint32
	// BlockSize is the engine's block size in tokens.
	BlockSize int
	// HasLoRA is set when the blocks belong to a LoRA adapter.
	HasLoRA bool
	// Medium is where the blocks live; "" (nil on the wire) means GPU.
	Medium string
}

// MediumOf maps an engine's medium string to Switchyard's KvMedium, case
// blind:
//
//   - none (nil on the wire: engines that predate media): unspecified,
//     which the router takes as GPU for a store and any medium for a
//     removal, as before media;
//   - "GPU" (vLLM, SGLang): GPU;
//   - "CPU" (vLLM's offloading connector, LMCache's connector, which
//     writes "cpu"), "CPU_TIER1" (SGLang HiCache's host memory): CPU;
//   - "DISK", "CPU_TIER2" (SGLang HiCache's tier below host memory, its
//     storage backend): disk;
//   - anything else: KV_MEDIUM_UNKNOWN, which the router keeps, prices as
//     disk and counts, so that a new engine tier is seen, not dropped.
func MediumOf(s string) workerv1.KvMedium {
	switch strings.ToUpper(s) {
	case "":
		return workerv1.KvMedium_KV_MEDIUM_UNSPECIFIED
	case "GPU":
		return workerv1.KvMedium_KV_MEDIUM_GPU
	case "CPU", "CPU_TIER1":
		return workerv1.KvMedium_KV_MEDIUM_CPU
	case "DISK", "CPU_TIER2":
		return workerv1.KvMedium_KV_MEDIUM_DISK
	default:
		return workerv1.KvMedium_KV_MEDIUM_UNKNOWN
	}
}

// Batch is one decoded engine KV event message.
type Batch struct {
	// Timestamp is the engine's, in seconds since the epoch.
	Timestamp float64
	Events    []Event
	// DPRank is the data-parallel rank, when HasDPRank.
	DPRank    int64
	HasDPRank bool
}

// ErrMalformed wraps every reason a payload does not decode.
var ErrMalformed = errors.New("adapter: malformed KV event payload")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// DecodeBatch decodes a vLLM KV event payload: the msgpack array
// [timestamp, [events...], dp_rank|nil], each event a tagged array such as
// ["BlockStored", block_hashes, parent_hash|nil, token_ids, block_size,
// lora_id|nil, medium|nil, ...], ["BlockRemoved", block_hashes, medium|nil,
// ...] or ["AllBlocksCleared", ...]. Trailing fields it does not know are
// ignored, and so are events with an unknown tag. It is a pure function.
func DecodeBatch(payload []byte) (Batch, error) {
	r := bytes.NewReader(payload)
	v, err := decodeValue(msgpack.NewDecoder(r), r, 0)
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	top, ok := v.([]any)
	if !ok || len(top) < 2 {
		return Batch{}, malformed("not an array of at least [timestamp, events]")
	}
	var b Batch
	switch ts := top[0].(type) {
	case float64:
		b.Timestamp = ts
	case int64:
		b.Timestamp = float64(ts)
	case uint64:
		b.Timestamp = float64(ts)
	default:
		return Batch{}, malformed("timestamp is %T", top[0])
	}
	evs, ok := top[1].([]any)
	if !ok {
		return Batch{}, malformed("events are %T, not an array", top[1])
	}
	if len(top) > 2 && top[2] != nil {
		r, ok := asInt(top[2])
		if !ok {
			return Batch{}, malformed("dp_rank is %T", top[2])
		}
		b.DPRank, b.HasDPRank = r, true
	}
	for i, raw := range evs {
		e, known, err := decodeEvent(raw)
		if err != nil {
			return Batch{}, fmt.Errorf("event %d: %w", i, err)
		}
		if known {
			b.Events = append(b.Events, e)
		}
	}
	return b, nil
}

// maxDepth bounds the nesting of a payload.
const maxDepth = 16

// mapValue stands for a msgpack map, which no field of the format is.
type mapValue struct{}

// decodeValue decodes one msgpack value, arrays as []any and integers as
// int64 or uint64. Unlike DecodeInterface it never trusts a length header
// beyond the bytes left, so a hostile payload cannot make it allocate much.
func decodeValue(dec *msgpack.Decoder, r *bytes.Reader, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deep")
	}
	code, err := dec.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32:
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		if n < 0 || n > r.Len() {
			return nil, fmt.Errorf("array of %d elements in %d bytes", n, r.Len())
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = decodeValue(dec, r, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case msgpcode.IsFixedMap(code) || code == msgpcode.Map16 || code == msgpcode.Map32:
		n, err := dec.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		if n < 0 || 2*n > r.Len() {
			return nil, fmt.Errorf("map of %d entries in %d bytes", n, r.Len())
		}
		for range 2 * n {
			if _, err := decodeValue(dec, r, depth+1); err != nil {
				return nil, err
			}
		}
		return mapValue{}, nil
	case msgpcode.IsString(code) || msgpcode.IsBin(code):
		n, err := dec.DecodeBytesLen()
		if err != nil {
			return nil, err
		}
		if n < 0 || n > r.Len() {
			return nil, fmt.Errorf("string of %d bytes in %d bytes", n, r.Len())
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		if msgpcode.IsString(code) {
			return string(b), nil
		}
		return b, nil
	case msgpcode.IsExt(code):
		return nil, errors.New("msgpack extension types are not part of the format")
	}
	return dec.DecodeInterfaceLoose()
}

func decodeEvent(raw any) (Event, bool, error) {
	f, ok := raw.([]any)
	if !ok || len(f) == 0 {
		return Event{}, false, malformed("event is not a tagged array")
	}
	tag, ok := f[0].(string)
	if !ok {
		return Event{}, false, malformed("event tag is %T", f[0])
	}
	var e Event
	var err error
	switch tag {
	case "BlockStored":
		if len(f) < 5 {
			return Event{}, false, malformed("BlockStored has %d fields", len(f))
		}
		e.Kind = BlockStored
		if e.BlockHashes, err = hashList(f[1]); err != nil {
			return Event{}, false, err
		}
		if f[2] != nil {
			if e.Parent, err = hashOf(f[2]); err != nil {
				return Event{}, false, err
			}
			e.HasParent = true
		}
		toks, ok := f[3].([]any)
		if !ok {
			return Event{}, false, malformed("token_ids are %T", f[3])
		}
		e.TokenIDs = make([]uint32, len(toks))
		for i, t := range toks {
			n, ok := asInt(t)
			if !ok || n < 0 || n > math.MaxUint32 {
				return Event{}, false, malformed("token id %v", t)
			}
			e.TokenIDs[i] = uint32(n)
		}
		bs, ok := asInt(f[4])
		if !ok || bs <= 0 || bs > math.MaxInt32 {
			return Event{}, false, malformed("block_size %v", f[4])
		}
		e.BlockSize = int(bs)
		if len(f) > 5 && f[5] != nil {
			e.HasLoRA = true
		}
		if len(f) > 6 {
			if e.Medium, err = medium(f[6]); err != nil {
				return Event{}, false, err
			}
		}
	case "BlockRemoved":
		if len(f) < 2 {
			return Event{}, false, malformed("BlockRemoved has %d fields", len(f))
		}
		e.Kind = BlockRemoved
		if e.BlockHashes, err = hashList(f[1]); err != nil {
			return Event{}, false, err
		}
		if len(f) > 2 {
			if e.Medium, err = medium(f[2]); err != nil {
				return Event{}, false, err
			}
		}
	case "AllBlocksCleared":
		e.Kind = AllBlocksCleared
	default:
		return Event{}, false, nil
	}
	return e, true, nil
}

func medium(v any) (string, error) {
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", malformed("medium is %T", v)
	}
	return s, nil
}

func hashList(v any) ([]uint64, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, malformed("block_hashes are %T", v)
	}
	out := make([]uint64, len(l))
	for i, h := range l {
		var err error
		if out[i], err = hashOf(h); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hashOf reads an engine block hash: a signed or unsigned 64-bit integer,
// or a byte string (newer vLLM), folded to 64 bits.
func hashOf(v any) (uint64, error) {
	switch h := v.(type) {
	case int64:
		return uint64(h), nil
	case uint64:
		return h, nil
	case []byte:
		return xxh3.Hash(h), nil
	case string:
		return xxh3.HashString(h), nil
	}
	return 0, malformed("block hash is %T", v)
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}
