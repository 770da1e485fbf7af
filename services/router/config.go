package router

import (
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Config is the router's configuration.
type Config struct {
	Server grpcserver.Config
	// Mode is --router-mode.
	Mode string
	// NoKVEvents selects approximate mode: caches predicted from decisions
	// (--no-kv-events, --no-router-kv-events, or --kv-events-mode none).
	NoKVEvents bool
	// KVEventsMode is --kv-events-mode (see pkg/kvevents): where KV events
	// come from in kv mode.
	KVEventsMode string
	// ResyncInterval is how often, in core mode, each quiet worker is
	// asked for events past the last one applied (a lost tail).
	ResyncInterval time.Duration
	// Core tunes the decisions; its Mode and Approximate follow Mode and
	// NoKVEvents. Start from core.DefaultConfig() (RegisterFlags does).
	Core             core.Config
	ReplicaSync      bool
	ReplicaID        string
	SnapshotInterval time.Duration
	// RegistryAddr is a comma list of registry replicas.
	RegistryAddr string
	// EventbusAddr is a comma list of eventbus replicas.
	EventbusAddr string
	// Security secures calls to the registry and eventbus: ClientTLS and
	// ClientAuth (the token sent).
	grpcclient.Security
}

// EnvVars maps flags to their environment variables.
var EnvVars = map[string]string{
	"registry-addr":          "SWITCHYARD_REGISTRY_ADDR",
	"eventbus-addr":          "SWITCHYARD_EVENTBUS_ADDR",
	"auth-token":             authtoken.EnvToken,
	"client-auth-token-file": authtoken.EnvTokenFile,
}

// RegisterFlags adds the router's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Server.RegisterFlags(fs, ":7003", ":9103")
	fs.StringVar(&c.Mode, "router-mode", string(core.ModeKV), "routing mode: kv, round-robin, random, least-loaded, direct")
	fs.BoolVar(&c.NoKVEvents, "no-kv-events", false, "approximate mode: predict caches from routing decisions, consume no KV events")
	kvevents.RegisterAlias(fs, &c.NoKVEvents)
	fs.StringVar(&c.KVEventsMode, "kv-events-mode", string(kvevents.JetStream), kvevents.Usage)
	fs.DurationVar(&c.ResyncInterval, "kv-events-resync-interval", DefaultResyncInterval, "core mode: how often a quiet worker is asked for events past the last one applied")
	c.Core = core.DefaultConfig()
	c.Core.RegisterFlags(fs)
	fs.BoolVar(&c.ReplicaSync, "router-replica-sync", false, "share decisions and load with other router replicas over the eventbus")
	fs.StringVar(&c.ReplicaID, "router-replica-id", "", "this replica's id for --router-replica-sync, to which each start adds a random part (empty: random)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", time.Minute, "how often the index is snapshotted to the object store (0: never)")
	fs.StringVar(&c.RegistryAddr, "registry-addr", "localhost:7001", "registry address(es), comma-separated")
	fs.StringVar(&c.EventbusAddr, "eventbus-addr", "localhost:7002", "eventbus address(es), comma-separated; empty: no KV events, load reports or replica sync")
	c.Security.RegisterFlags(fs, "the registry and eventbus")
}

// Complete reads the files the settings name (the server's token and TLS
// files, the client's token and TLS files). Start calls it, then Validate.
func (c *Config) Complete() error {
	if err := c.Server.Complete(); err != nil {
		return err
	}
	return c.Security.Complete()
}

// Validate checks the configuration; it reads nothing and changes nothing.
func (c Config) Validate() error {
	if err := c.Server.Validate(); err != nil {
		return err
	}
	if err := c.coreConfig().Validate(); err != nil {
		return err
	}
	if _, err := c.EventsMode(); err != nil {
		return err
	}
	switch {
	case c.SnapshotInterval < 0:
		return errors.New("--snapshot-interval must not be negative")
	case c.ResyncInterval < 0:
		return errors.New("--kv-events-resync-interval must not be negative")
	case strings.TrimSpace(c.RegistryAddr) == "":
		return errors.New("--registry-addr (SWITCHYARD_REGISTRY_ADDR) is required")
	case c.ReplicaSync && strings.TrimSpace(c.EventbusAddr) == "":
		// Replicas share their decisions and load over the eventbus.
		return errors.New("--router-replica-sync needs --eventbus-addr (SWITCHYARD_EVENTBUS_ADDR)")
	}
	return c.Security.Validate()
}

// coreConfig derives the Core's configuration: Core with the mode flags.
// An unparsable Mode is left for core.Config.Validate to name.
func (c Config) coreConfig() core.Config {
	cc := c.Core
	cc.Mode = core.Mode(c.Mode)
	if m, err := core.ParseMode(c.Mode); err == nil {
		cc.Mode = m
	}
	m, _ := c.EventsMode()
	cc.Approximate = m == kvevents.None
	return cc
}

// EventsMode is the effective KV event mode: none with --no-kv-events.
func (c Config) EventsMode() (kvevents.Mode, error) {
	return kvevents.Flags{Mode: c.KVEventsMode, NoEvents: c.NoKVEvents}.Resolve()
}
