package core

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Mode is a routing mode.
type Mode string

// The routing modes.
const (
	ModeKV          Mode = "kv"
	ModeRoundRobin  Mode = "round-robin"
	ModeRandom      Mode = "random"
	ModeLeastLoaded Mode = "least-loaded"
	ModeDirect      Mode = "direct"
)

// Modes are the valid routing modes, in the order help texts list them:
// those modes.go lists.
var Modes = listedModes()

// ParseMode parses --router-mode, case-insensitively.
func ParseMode(s string) (Mode, error) {
	return ParseModeOf(s, Modes)
}

// ParseModeOf parses --router-mode against the modes valid for a caller.
func ParseModeOf(s string, valid []Mode) (Mode, error) {
	for _, m := range valid {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	names := make([]string, len(valid))
	for i, m := range valid {
		names[i] = string(m)
	}
	return "", fmt.Errorf("invalid --router-mode %q: valid values are %s", s, strings.Join(names, ", "))
}

// Disaggregation is --disaggregation: where the prompt of a model with
// prefill and decode pools is computed.
type Disaggregation string

// The disaggregation settings.
const (
	// DisaggAuto computes it on a prefill worker and moves its KV to the
	// decode worker when that is predicted to bring the first token
	// sooner than computing it on the decode (or aggregated) worker, and
	// locally otherwise. The zero value reads as auto.
	DisaggAuto Disaggregation = "auto"
	// DisaggAlways computes it on a prefill worker whenever the model has
	// prefill and decode workers.
	DisaggAlways Disaggregation = "always"
	// DisaggOff computes it on the worker that decodes: the prefill pool
	// is not used.
	DisaggOff Disaggregation = "off"
)

// Disaggregations are the valid --disaggregation values.
var Disaggregations = []Disaggregation{DisaggAuto, DisaggAlways, DisaggOff}

// ParseDisaggregation parses --disaggregation, case-insensitively.
func ParseDisaggregation(s string) (Disaggregation, error) {
	for _, d := range Disaggregations {
		if strings.EqualFold(s, string(d)) {
			return d, nil
		}
	}
	return "", fmt.Errorf("invalid --disaggregation %q: valid values are auto, always, off", s)
}

// String is the setting's name; the zero value is auto.
func (d Disaggregation) String() string {
	if d == "" {
		return string(DisaggAuto)
	}
	return string(d)
}

// Set parses a flag value.
func (d *Disaggregation) Set(s string) error {
	v, err := ParseDisaggregation(s)
	if err == nil {
		*d = v
	}
	return err
}

// DefaultConfig is the one set of defaults for every Core: the router
// service's flags, the frontend's in-process router and the tests start from
// it.
func DefaultConfig() Config {
	return Config{
		Mode:             ModeKV,
		OverlapWeight:    1,
		Temperature:      0,
		TTL:              120 * time.Second,
		MaxTreeSize:      1 << 20,
		PruneTargetRatio: 0.8,
		RequestTTL:       30 * time.Minute,
		Disaggregation:   DisaggAuto,
		KVTransferGbps:   DefaultKVTransferGbps,
		KVBytesPerToken:  DefaultKVBytesPerToken,
		KVTransferRTT:    DefaultKVTransferRTT,

		QueueTTFTThreshold: DefaultQueueTTFTThreshold * time.Millisecond,

		SessionTTL:      DefaultSessionTTL,
		SessionAffinity: AffinitySoft,
		MaxSessions:     DefaultMaxSessions,

		KVTiers:   true,
		KVTierTTL: DefaultKVTierTTL,
	}
}

// DefaultKVTierTTL is --kv-tier-ttl's default: how long a block stored on
// a lower tier (host memory, disk) that its worker never reports evicting
// from that tier stays in the index. Store-only sources (LMCache publishes
// its offloads, not its evictions) evict silently, least recently used
// first, and an offload tier of tens of gigabytes turns over in about a
// minute under steady prefill (40 GB at 128 KiB of KV per token is 300k
// tokens, a minute of prompts at 5k tokens/s): a block older than that is
// more likely gone than held, and crediting a gone block costs a request
// its whole prefill. A tier whose worker reports removals never ages.
const DefaultKVTierTTL = time.Minute

// The defaults of the KV transfer between a prefill and a decode worker,
// as the router prices it (the mocker's defaults): a 100 Gb/s link with a
// millisecond's set-up,
// moving the bf16 KV cache of a Qwen3-0.6B-sized model (28 layers, 8 KV
// heads of 128, keys and values: 114,688 bytes per token).
const (
	DefaultKVTransferGbps  = 100
	DefaultKVBytesPerToken = 114688
	DefaultKVTransferRTT   = time.Millisecond
)

// RegisterFlags adds the flags that tune a Core's decisions, with c's
// current values (normally DefaultConfig()) as defaults. Mode and
// Approximate come from each service's own --router-mode and --no-kv-events.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.OverlapWeight, "kv-overlap-score-weight", c.OverlapWeight, "multiplies the predicted prefill time in the cost (1: the workers' published timing models as they are)")
	fs.Float64Var(&c.Temperature, "router-temperature", c.Temperature, "0 picks the cheapest worker; higher samples by softmax over costs")
	fs.Var((*seconds)(&c.TTL), "router-ttl-secs", "approximate mode: seconds a predicted block lives")
	fs.IntVar(&c.MaxTreeSize, "router-max-tree-size", c.MaxTreeSize, "approximate mode: (block, worker) entries before pruning")
	fs.Float64Var(&c.PruneTargetRatio, "router-prune-target-ratio", c.PruneTargetRatio, "approximate mode: fraction of the max size pruning keeps")
	fs.DurationVar(&c.RequestTTL, "router-request-ttl", c.RequestTTL, "forget routed requests never freed after this long (their frontend or router replica died); 0: never")
	fs.Var(&c.Disaggregation, "disaggregation", "models with prefill and decode workers: auto (prefill on a prefill worker when predicted faster than on the decode worker), always, off (prefill where it decodes)")
	fs.Float64Var(&c.KVTransferGbps, "kv-transfer-gbps", c.KVTransferGbps, "disaggregation: the prefill-to-decode KV link's bandwidth in Gb/s, to price moving the blocks a decode worker lacks (0: free)")
	fs.IntVar(&c.KVBytesPerToken, "kv-bytes-per-token", c.KVBytesPerToken, "disaggregation: bytes of KV cache per token, to price its transfer")
	fs.DurationVar(&c.KVTransferRTT, "kv-transfer-latency", c.KVTransferRTT, "disaggregation: a KV transfer's set-up time, paid once per request")
	fs.DurationVar(&c.QueueTTFTThreshold, "queue-ttft-threshold", c.QueueTTFTThreshold, "the fleet is saturated for a request (frontends queue) when its predicted time to first token is past this on every worker; default the fleet's TTFT objective (the planner's --ttft-slo default); 0: off")
	fs.IntVar(&c.QueuePrefillBudget, "queue-prefill-budget", c.QueuePrefillBudget, "the fleet is also saturated when every worker has more than this many prompt tokens queued for prefill; 0: off")
	fs.DurationVar(&c.SessionTTL, "session-ttl", c.SessionTTL, "a conversation (x-session-id) idle this long loses its binding to a worker (0: 10m)")
	fs.Var(&c.SessionAffinity, "session-affinity", "soft (a conversation leaves its worker when that one is full under the --queue-* limits and another is not, and the binding moves) or hard (it stays while its worker lives)")
	fs.IntVar(&c.MaxSessions, "session-max-bindings", c.MaxSessions, "the most session bindings kept; past it the least recently used goes (0: 100000)")
	fs.BoolVar(&c.KVTiers, "kv-tiers", c.KVTiers, "index the cache tier of each block (the KV events' medium: gpu, cpu, disk) and credit a lower-tier hit by its load time from the worker's timing model; false: GPU blocks only, a block moved off GPU is gone")
	fs.DurationVar(&c.KVTierTTL, "kv-tier-ttl", c.KVTierTTL, "a block on a lower tier (cpu, disk) of a worker that never reports evicting from that tier (store-only sources such as LMCache) leaves the index this long after its store; 0: never")
}

// Validate checks the configuration; it reads nothing.
func (c Config) Validate() error {
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return err
	}
	switch {
	case c.OverlapWeight < 0 || math.IsNaN(c.OverlapWeight):
		return fmt.Errorf("--kv-overlap-score-weight %v must not be negative", c.OverlapWeight)
	case c.Temperature < 0 || math.IsNaN(c.Temperature):
		return fmt.Errorf("--router-temperature %v must not be negative", c.Temperature)
	case c.KVTierTTL < 0:
		return fmt.Errorf("--kv-tier-ttl %v must not be negative", c.KVTierTTL)
	case c.TTL <= 0:
		return fmt.Errorf("--router-ttl-secs %v must be positive", c.TTL.Seconds())
	case c.MaxTreeSize < 1:
		return fmt.Errorf("--router-max-tree-size %d must be positive", c.MaxTreeSize)
	case c.PruneTargetRatio <= 0 || c.PruneTargetRatio > 1:
		return fmt.Errorf("--router-prune-target-ratio %v must be in (0, 1]", c.PruneTargetRatio)
	case c.RequestTTL < 0:
		return errors.New("--router-request-ttl must not be negative")
	case c.KVTransferGbps < 0 || math.IsNaN(c.KVTransferGbps) || math.IsInf(c.KVTransferGbps, 0):
		return fmt.Errorf("--kv-transfer-gbps %v must be a finite number >= 0", c.KVTransferGbps)
	case c.KVBytesPerToken < 0:
		return fmt.Errorf("--kv-bytes-per-token %d must not be negative", c.KVBytesPerToken)
	case c.KVTransferRTT < 0:
		return fmt.Errorf("--kv-transfer-latency %v must not be negative", c.KVTransferRTT)
	case c.QueueTTFTThreshold < 0:
		return fmt.Errorf("--queue-ttft-threshold %v must not be negative", c.QueueTTFTThreshold)
	case c.QueuePrefillBudget < 0:
		return fmt.Errorf("--queue-prefill-budget %d must not be negative", c.QueuePrefillBudget)
	case c.SessionTTL < 0:
		return fmt.Errorf("--session-ttl %v must not be negative", c.SessionTTL)
	case c.MaxSessions < 0:
		return fmt.Errorf("--session-max-bindings %d must not be negative", c.MaxSessions)
	}
	if c.SessionAffinity != "" {
		if _, err := ParseAffinity(string(c.SessionAffinity)); err != nil {
			return err
		}
	}
	if c.Disaggregation != "" {
		if _, err := ParseDisaggregation(string(c.Disaggregation)); err != nil {
			return err
		}
	}
	return nil
}

// seconds is a time.Duration flag given in (fractional) seconds, as
// --router-ttl-secs has always been.
type seconds time.Duration

func (s *seconds) String() string {
	if s == nil {
		return "0"
	}
	return strconv.FormatFloat(time.Duration(*s).Seconds(), 'g', -1, 64)
}

func (s *seconds) Set(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%v is not a number of seconds", v)
	}
	*s = seconds(f * float64(time.Second))
	return nil
}
