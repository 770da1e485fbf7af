package router

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
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

var modes = []Mode{ModeKV, ModeRoundRobin, ModeRandom, ModeLeastLoaded, ModeDirect}

// ParseMode parses --router-mode.
func ParseMode(s string) (Mode, error) {
	for _, m := range modes {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("invalid --router-mode %q: valid values are %s", s, strings.Join(names, ", "))
}

// Config is the router's configuration.
type Config struct {
	Server grpcserver.Config
	// Mode is --router-mode.
	Mode string
	// NoKVEvents selects approximate mode: caches predicted from decisions.
	NoKVEvents       bool
	OverlapWeight    float64
	Temperature      float64
	TTLSecs          float64
	MaxTreeSize      int
	PruneTargetRatio float64
	ReplicaSync      bool
	ReplicaID        string
	SnapshotInterval time.Duration
	// RegistryAddr is a comma list of registry replicas.
	RegistryAddr string
	// EventbusAddr is a comma list of eventbus replicas.
	EventbusAddr string
	// ClientTLS secures calls to the registry and eventbus.
	ClientTLS tlsconfig.Config
}

// EnvVars maps flags to their environment variables.
var EnvVars = map[string]string{
	"registry-addr": "SWITCHYARD_REGISTRY_ADDR",
	"eventbus-addr": "SWITCHYARD_EVENTBUS_ADDR",
}

// RegisterFlags adds the router's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Server.RegisterFlags(fs, ":7003", ":9103")
	fs.StringVar(&c.Mode, "router-mode", string(ModeKV), "routing mode: kv, round-robin, random, least-loaded, direct")
	fs.BoolVar(&c.NoKVEvents, "no-kv-events", false, "approximate mode: predict caches from routing decisions, consume no KV events")
	fs.Float64Var(&c.OverlapWeight, "kv-overlap-score-weight", 1.0, "weight of prefill blocks against decode blocks in the cost")
	fs.Float64Var(&c.Temperature, "router-temperature", 0, "0 picks the cheapest worker; higher samples by softmax over costs")
	fs.Float64Var(&c.TTLSecs, "router-ttl-secs", 120, "approximate mode: seconds a predicted block lives")
	fs.IntVar(&c.MaxTreeSize, "router-max-tree-size", 1<<20, "approximate mode: (block, worker) entries before pruning")
	fs.Float64Var(&c.PruneTargetRatio, "router-prune-target-ratio", 0.8, "approximate mode: fraction of the max size pruning keeps")
	fs.BoolVar(&c.ReplicaSync, "router-replica-sync", false, "share decisions and load with other router replicas over the eventbus")
	fs.StringVar(&c.ReplicaID, "router-replica-id", "", "this replica's id for --router-replica-sync (empty: random)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", time.Minute, "how often the index is snapshotted to the object store (0: never)")
	fs.StringVar(&c.RegistryAddr, "registry-addr", "localhost:7001", "registry address(es), comma-separated")
	fs.StringVar(&c.EventbusAddr, "eventbus-addr", "localhost:7002", "eventbus address(es), comma-separated; empty: no KV events, load reports or replica sync")
	fs.StringVar(&c.ClientTLS.CertFile, "client-tls-cert", "", "client certificate for the registry and eventbus (mutual TLS)")
	fs.StringVar(&c.ClientTLS.KeyFile, "client-tls-key", "", "client key for --client-tls-cert")
	fs.StringVar(&c.ClientTLS.CAFile, "client-tls-ca", "", "CA that verifies the registry and eventbus")
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if err := c.Server.Validate(); err != nil {
		return err
	}
	if _, err := ParseMode(c.Mode); err != nil {
		return err
	}
	switch {
	case c.OverlapWeight < 0:
		return fmt.Errorf("--kv-overlap-score-weight %v must not be negative", c.OverlapWeight)
	case c.Temperature < 0:
		return fmt.Errorf("--router-temperature %v must not be negative", c.Temperature)
	case c.TTLSecs <= 0:
		return fmt.Errorf("--router-ttl-secs %v must be positive", c.TTLSecs)
	case c.MaxTreeSize < 1:
		return fmt.Errorf("--router-max-tree-size %d must be positive", c.MaxTreeSize)
	case c.PruneTargetRatio <= 0 || c.PruneTargetRatio > 1:
		return fmt.Errorf("--router-prune-target-ratio %v must be in (0, 1]", c.PruneTargetRatio)
	case c.SnapshotInterval < 0:
		return errors.New("--snapshot-interval must not be negative")
	case strings.TrimSpace(c.RegistryAddr) == "":
		return errors.New("--registry-addr (SWITCHYARD_REGISTRY_ADDR) is required")
	}
	return c.ClientTLS.Validate()
}

// coreConfig derives the Core's configuration.
func (c Config) coreConfig() CoreConfig {
	m, _ := ParseMode(c.Mode)
	return CoreConfig{
		Mode: m, Approximate: c.NoKVEvents, OverlapWeight: c.OverlapWeight, Temperature: c.Temperature,
		TTL: time.Duration(c.TTLSecs * float64(time.Second)), MaxTreeSize: c.MaxTreeSize, PruneTargetRatio: c.PruneTargetRatio,
	}
}
