// Package replay replays a Mooncake-format request trace against simulated
// engines (the mocker's cache and timing model, in virtual time: nothing
// sleeps) behind the router's real index, load tracking and scheduler, and
// reports per routing mode the prefix hit rate, time to first token,
// end-to-end latency, throughput and load spread.
package replay

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Request is one line of a Mooncake trace.
type Request struct {
	// Arrival is the request's timestamp.
	Arrival time.Duration
	// InputLength and OutputLength are token counts.
	InputLength, OutputLength int
	// HashIDs name the prompt's blocks of TraceBlockSize tokens; equal ids
	// are equal (shareable) blocks.
	HashIDs []uint64
	// Session names the conversation the request is a turn of (the trace's
	// optional session_id); 0 is none. The session modes route with it.
	Session uint64
	// LoRA is the LoRA adapter the request runs with (the trace's
	// optional lora_name, or AssignLoRAs); empty is the base model.
	LoRA string
}

// ErrBadTrace wraps every trace parsing error.
var ErrBadTrace = errors.New("replay: bad trace")

// Limits on trace lines, so a corrupt trace fails clearly instead of
// exhausting memory.
const (
	MaxInputLength  = 1 << 20
	MaxOutputLength = 1 << 16
	maxLine         = 16 << 20
)

type traceLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
	SessionID    uint64   `json:"session_id"`
	LoraName     string   `json:"lora_name"`
}

// ParseTrace reads a JSON-lines trace; blank lines are skipped. Every line
// needs timestamp (ms, non-negative), input_length (1..2^20), output_length
// (1..2^16) and hash_ids covering the input at traceBlock tokens per id.
func ParseTrace(r io.Reader, traceBlock int) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var out []Request
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var tl traceLine
		if err := json.Unmarshal([]byte(line), &tl); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, n, err)
		}
		req, err := tl.request(traceBlock)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, n, err)
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTrace, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no requests", ErrBadTrace)
	}
	return out, nil
}

func (tl traceLine) request(traceBlock int) (Request, error) {
	switch {
	case tl.Timestamp == nil || tl.InputLength == nil || tl.OutputLength == nil:
		return Request{}, errors.New("timestamp, input_length and output_length are required")
	case *tl.Timestamp < 0 || *tl.Timestamp > 1e12:
		return Request{}, fmt.Errorf("timestamp %v is outside 0..1e12 ms", *tl.Timestamp)
	case *tl.InputLength < 1 || *tl.InputLength > MaxInputLength:
		return Request{}, fmt.Errorf("input_length %d is outside 1..%d", *tl.InputLength, MaxInputLength)
	case *tl.OutputLength < 1 || *tl.OutputLength > MaxOutputLength:
		return Request{}, fmt.Errorf("output_length %d is outside 1..%d", *tl.OutputLength, MaxOutputLength)
	case core.ValidLoRAName(tl.LoraName) != nil && tl.LoraName != "":
		return Request{}, fmt.Errorf("lora_name %q: %v", tl.LoraName, core.ValidLoRAName(tl.LoraName))
	}
	need := (*tl.InputLength + traceBlock - 1) / traceBlock
	if len(tl.HashIDs) < need {
		return Request{}, fmt.Errorf("%d hash_ids cover %d tokens, fewer than input_length %d", len(tl.HashIDs), len(tl.HashIDs)*traceBlock, *tl.InputLength)
	}
	return Request{
		Arrival:      time.Duration(*tl.Timestamp * float64(time.Millisecond)),
		InputLength:  *tl.InputLength,
		OutputLength: *tl.OutputLength,
		HashIDs:      tl.HashIDs[:need],
		Session:      tl.SessionID,
		LoRA:         tl.LoraName,
	}, nil
}

// AssignLoRAs gives every request of trace one of n LoRA adapters,
// "lora-0" to "lora-{n-1}", by its first block's hash id: requests that
// share a prompt's start (an application's system prompt) share an
// adapter, as an application serves one fine-tune. Requests that name an
// adapter already keep it; n <= 0 leaves the trace as it is.
func AssignLoRAs(trace []Request, n int) {
	if n <= 0 {
		return
	}
	for i := range trace {
		if trace[i].LoRA == "" && len(trace[i].HashIDs) > 0 {
			trace[i].LoRA = "lora-" + strconv.FormatUint(trace[i].HashIDs[0]%uint64(n), 10)
		}
	}
}

// LoadTrace reads a trace file, gzip-compressed when its name ends in .gz.
func LoadTrace(path string, traceBlock int) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadTrace, err)
		}
		defer gz.Close()
		r = gz
	}
	return ParseTrace(r, traceBlock)
}

// Tokens synthesises a request's prompt: each trace block id becomes the
// same traceBlock tokens wherever it appears, so equal ids share KV blocks
// exactly as the trace says. Token ids stay in [1000, 150000), the range of
// ordinary Qwen3 tokens.
func Tokens(req Request, traceBlock int, dst []uint32) []uint32 {
	dst = dst[:0]
	for i, id := range req.HashIDs {
		n := traceBlock
		if rest := req.InputLength - i*traceBlock; rest < n {
			n = rest
		}
		x := id*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
		for range n {
			x ^= x >> 31
			x *= 0xbf58476d1ce4e5b9
			x ^= x >> 29
			dst = append(dst, 1000+uint32(x%149000))
		}
	}
	return dst
}
