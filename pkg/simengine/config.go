package simengine

import (
	"errors"
	"fmt"
	"math"

	"github.com/switchyard-llm/switchyard/pkg/kvhash"
)

// ErrInvalidConfig is returned by Config.Validate and New for a configuration
// the engine cannot run with.
var ErrInvalidConfig = errors.New("invalid engine config")

// Config sizes and paces the simulated engine. Its field names follow the vLLM
// (and Dynamo mocker) options of the same meaning.
type Config struct {
	// BlockSize is the number of tokens per KV block.
	BlockSize int
	// NumGPUBlocks is the number of KV blocks of the cache.
	NumGPUBlocks int
	// NumHostBlocks is the number of KV blocks of the host-memory tier
	// that blocks evicted from the GPU go to (see hostTier); 0: none.
	NumHostBlocks int
	// MaxNumSeqs is the most requests running at once.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the most tokens (prefill chunks plus one per
	// decoding request) computed in one step.
	MaxNumBatchedTokens int
	// SpeedupRatio divides every simulated duration; 0 means no delay at all.
	SpeedupRatio float64
	// OutputTokenMin and OutputTokenMax bound generated token ids to
	// [OutputTokenMin, OutputTokenMax), so that a real tokenizer can decode
	// them: the defaults stay among Qwen3's ordinary tokens, below its special
	// tokens (151643 and up).
	OutputTokenMin, OutputTokenMax uint32
	// OutputText, when set, replaces the range: a request's output is this
	// token sequence read from a position derived from the prompt and seed
	// (wrapping around), so a mocker's answers read as text.
	OutputText []uint32
	// MaxLoras is how many LoRA adapters the engine holds loaded at once
	// (vLLM's --max-loras): requests running in one step use at most that
	// many adapters, and a request whose adapter would exceed it waits
	// while later requests go ahead. 0 serves no adapter.
	MaxLoras int
	// LoraLoadMs is the time to load an adapter that is not loaded, added
	// to the step that first schedules a request with it (divided by the
	// speed-up ratio as every duration is).
	LoraLoadMs float64
}

// DefaultConfig returns vLLM's defaults: 16-token blocks, 16384 blocks, 256
// sequences and 8192 tokens per step, in real time.
func DefaultConfig() Config {
	return Config{
		BlockSize:           kvhash.DefaultBlockSize,
		NumGPUBlocks:        16384,
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 8192,
		SpeedupRatio:        1,
		OutputTokenMin:      1000,
		OutputTokenMax:      150000,
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: block size %d must be positive", ErrInvalidConfig, c.BlockSize)
	case c.NumHostBlocks < 0:
		return fmt.Errorf("%w: num host blocks %d must not be negative", ErrInvalidConfig, c.NumHostBlocks)
	case c.NumGPUBlocks <= 0:
		return fmt.Errorf("%w: num gpu blocks %d must be positive", ErrInvalidConfig, c.NumGPUBlocks)
	case c.MaxNumSeqs <= 0:
		return fmt.Errorf("%w: max num seqs %d must be positive", ErrInvalidConfig, c.MaxNumSeqs)
	case c.MaxNumBatchedTokens <= 0:
		return fmt.Errorf("%w: max num batched tokens %d must be positive", ErrInvalidConfig, c.MaxNumBatchedTokens)
	case c.SpeedupRatio < 0 || c.SpeedupRatio != c.SpeedupRatio:
		return fmt.Errorf("%w: speedup ratio %v must be 0 (no delay) or positive", ErrInvalidConfig, c.SpeedupRatio)
	case c.OutputTokenMin >= c.OutputTokenMax:
		return fmt.Errorf("%w: output token range [%d, %d) is empty", ErrInvalidConfig, c.OutputTokenMin, c.OutputTokenMax)
	case c.MaxLoras < 0 || c.MaxLoras > MaxLoras:
		return fmt.Errorf("%w: max loras %d must be 0..%d", ErrInvalidConfig, c.MaxLoras, MaxLoras)
	case !(c.LoraLoadMs >= 0) || math.IsInf(c.LoraLoadMs, 0):
		return fmt.Errorf("%w: lora load time %v ms must be a finite number >= 0", ErrInvalidConfig, c.LoraLoadMs)
	}
	return nil
}
