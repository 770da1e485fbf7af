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

// Modes are the valid routing modes, in the order help texts list them.
var Modes = []Mode{ModeKV, ModeRoundRobin, ModeRandom, ModeLeastLoaded, ModeDirect}

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
	}
}

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
	case c.TTL <= 0:
		return fmt.Errorf("--router-ttl-secs %v must be positive", c.TTL.Seconds())
	case c.MaxTreeSize < 1:
		return fmt.Errorf("--router-max-tree-size %d must be positive", c.MaxTreeSize)
	case c.PruneTargetRatio <= 0 || c.PruneTargetRatio > 1:
		return fmt.Errorf("--router-prune-target-ratio %v must be in (0, 1]", c.PruneTargetRatio)
	case c.RequestTTL < 0:
		return errors.New("--router-request-ttl must not be negative")
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
