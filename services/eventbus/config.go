package eventbus

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// EnvVars maps the eventbus flags that have documented environment variables
// to those variables; pass it as cli.Options.Env. Every other flag falls back
// to SWITCHYARD_EVENTBUS_<FLAG>.
var EnvVars = map[string]string{
	"nats-server":   "NATS_SERVER",
	"nats-user":     "NATS_USER",
	"nats-password": "NATS_PASSWORD",
	"nats-token":    "NATS_TOKEN",
	"nats-creds":    "NATS_CREDS",
	"nats-ca":       "NATS_CA",
	"nats-cert":     "NATS_CERT",
	"nats-key":      "NATS_KEY",
}

// EnvPrefix is the generic environment prefix of the eventbus flags.
const EnvPrefix = "SWITCHYARD_EVENTBUS_"

// Config is the eventbus configuration.
type Config struct {
	// Server is the gRPC server's listen addresses, TLS and shutdown settings.
	Server grpcserver.Config
	// NATSServer is a comma-separated list of NATS URLs. Empty starts an
	// embedded nats-server with JetStream under DataDir.
	NATSServer string
	// NATSUser and NATSPassword authenticate to an external NATS server.
	NATSUser, NATSPassword string
	// NATSToken authenticates to an external NATS server with a token.
	NATSToken string
	// NATSCreds is a NATS credentials file (JWT and nkey seed).
	NATSCreds string
	// NATSTLS is the TLS of the connection to an external NATS: the CA
	// that verifies it and the client certificate a server with TLS verify
	// asks for (the nats CLI's NATS_CA, NATS_CERT, NATS_KEY).
	NATSTLS tlsconfig.Config
	// DataDir holds the embedded nats-server's JetStream store.
	DataDir string
	// EmbeddedNATSPort is the client port of the embedded nats-server on
	// 127.0.0.1, so that other local services can share it; -1 picks a free
	// port.
	EmbeddedNATSPort int
	// StreamMaxAge is how long a namespace's stream keeps its events.
	StreamMaxAge time.Duration
	// DedupWindow is how long a stream remembers msg ids: a publish retried
	// within it is stored once. JetStream keeps every id of the window in
	// memory. Zero means DefaultDedupWindow.
	DedupWindow time.Duration
	// DeliverLinger is how long a subscription's batch may wait for events
	// that JetStream reports pending, so that a burst or a replay goes out in
	// large responses; an event with nothing pending after it goes out at
	// once. Zero means DefaultDeliverLinger; a negative value never waits.
	DeliverLinger time.Duration
	// NATSMaxReconnects is how many times the NATS connection tries to
	// reconnect before giving up, and how many times the first connection
	// is retried when NATS is not there at startup (0: Start fails at once;
	// past the last retry Wait returns the error); -1 (the flag's default)
	// is forever. Zero with NATSReconnectWait and NATSReconnectBuffer zero
	// too (a Config built in code) is forever as well.
	NATSMaxReconnects int
	// NATSReconnectWait is the pause between reconnect attempts to one
	// server (nats.go adds its own jitter).
	NATSReconnectWait time.Duration
	// NATSReconnectBuffer is how many bytes of publishes the connection
	// holds while it reconnects; a publish past it fails at once with an
	// error naming the buffer instead of waiting.
	NATSReconnectBuffer int
	// StreamReplicas is the replica count of a namespace stream the eventbus
	// creates: 1 on a single server, 3 on a NATS cluster.
	StreamReplicas int
	// CoalesceEvents are the event names (a subject's last token) whose
	// events the eventbus stores several to a message while the subject is
	// busy (coalesce.go); none when empty or nil (FleetCoalesceEvents is
	// what a large fleet sets).
	CoalesceEvents []string
	// CoalesceGap is the least time between two stream messages of a
	// coalesced subject: its sender waits it out after each message while
	// at most one message's worth of events waits, so that the events that
	// come meanwhile go out together. Without it a busy subject is stored
	// as fast as the stream answers (one message in flight), and a subject
	// whose events come a little slower than that is stored nearly one
	// event per message: NATS's and the eventbus's cost per stored message
	// is then paid per event. 0 waits for nothing.
	CoalesceGap time.Duration
	// PublishRateTarget is how many batches a second the publishing
	// streams together may send before the eventbus asks each to hold its
	// batches for an interval (pace.go), to its fair share of this rate: a
	// worker's SDK then merges the KV batches that come meanwhile. 0 is
	// DefaultPublishRateTarget; negative never asks.
	PublishRateTarget int
}

// maxReconnects is NATSMaxReconnects with a Config built in code (all three
// reconnection settings zero) read as forever.
func (c Config) maxReconnects() int {
	if c.NATSMaxReconnects == 0 && c.NATSReconnectWait == 0 && c.NATSReconnectBuffer == 0 {
		return -1
	}
	return c.NATSMaxReconnects
}

// Defaults of the NATS reconnection settings.
const (
	DefaultNATSReconnectWait   = 250 * time.Millisecond
	DefaultNATSReconnectBuffer = 16 << 20
)

// DefaultDedupWindow is the default Config.DedupWindow.
const DefaultDedupWindow = 2 * time.Minute

// dedupWindow is the window to use.
func (c Config) dedupWindow() time.Duration {
	if c.DedupWindow == 0 {
		return DefaultDedupWindow
	}
	return c.DedupWindow
}

// coalesceEvents is the event names to coalesce.
func (c Config) coalesceEvents() []string {
	return c.CoalesceEvents
}

// publishRateTarget is the target to pace publishers to, 0 for none.
func (c Config) publishRateTarget() int {
	switch {
	case c.PublishRateTarget == 0:
		return DefaultPublishRateTarget
	case c.PublishRateTarget < 0:
		return 0
	}
	return c.PublishRateTarget
}

// DefaultDeliverLinger is the default Config.DeliverLinger.
const DefaultDeliverLinger = 500 * time.Microsecond

// maxDeliverLinger bounds Config.DeliverLinger.
const maxDeliverLinger = time.Second

// deliverLinger is the linger to use.
func (c Config) deliverLinger() time.Duration {
	switch {
	case c.DeliverLinger == 0:
		return DefaultDeliverLinger
	case c.DeliverLinger < 0:
		return 0
	}
	return c.DeliverLinger
}

// RegisterFlags adds the eventbus flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Server.RegisterFlags(fs, ":7002", ":9102")
	fs.StringVar(&c.NATSServer, "nats-server", "", "NATS server URLs, comma-separated (env NATS_SERVER); empty starts an embedded nats-server with JetStream")
	fs.StringVar(&c.NATSUser, "nats-user", "", "NATS user name (env NATS_USER)")
	fs.StringVar(&c.NATSPassword, "nats-password", "", "NATS password (env NATS_PASSWORD)")
	fs.StringVar(&c.NATSToken, "nats-token", "", "NATS authentication token (env NATS_TOKEN)")
	fs.StringVar(&c.NATSCreds, "nats-creds", "", "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&c.NATSTLS.CAFile, "nats-ca", "", "CA bundle that verifies an external NATS server (env NATS_CA)")
	fs.StringVar(&c.NATSTLS.CertFile, "nats-cert", "", "client certificate for an external NATS server that verifies clients (env NATS_CERT)")
	fs.StringVar(&c.NATSTLS.KeyFile, "nats-key", "", "client key for --nats-cert (env NATS_KEY)")
	fs.StringVar(&c.DataDir, "data-dir", ".data/eventbus", "directory of the embedded nats-server's JetStream store")
	fs.IntVar(&c.EmbeddedNATSPort, "embedded-nats-port", 4222, "client port of the embedded nats-server on 127.0.0.1 (-1: any free port)")
	fs.DurationVar(&c.StreamMaxAge, "stream-max-age", time.Hour, "how long a namespace's stream keeps its events")
	fs.DurationVar(&c.DedupWindow, "dedup-window", DefaultDedupWindow, "how long a stream remembers msg ids, so that a retried publish is stored once (kept in memory)")
	fs.IntVar(&c.NATSMaxReconnects, "nats-max-reconnects", -1, "how many times to try reconnecting to NATS before giving up, at startup too (-1: forever; 0: exit when NATS is not there)")
	fs.DurationVar(&c.NATSReconnectWait, "nats-reconnect-wait", DefaultNATSReconnectWait, "pause between reconnect attempts to a NATS server")
	fs.IntVar(&c.NATSReconnectBuffer, "nats-reconnect-buffer", DefaultNATSReconnectBuffer, "bytes of publishes held while NATS reconnects; past it a publish fails at once")
	fs.IntVar(&c.StreamReplicas, "stream-replicas", 1, "replicas of a namespace stream the eventbus creates (3 on a NATS cluster; at most 5)")
	fs.DurationVar(&c.DeliverLinger, "deliver-linger", DefaultDeliverLinger, "how long a subscription's batch may wait for events JetStream reports pending (negative: never wait)")
	fs.DurationVar(&c.CoalesceGap, "coalesce-gap", 0, "least time between two stream messages of a coalesced subject (--coalesce-events): the events that come meanwhile go out together, each delayed by up to this much (0: none; a message is stored as soon as the one before it is)")
	fs.IntVar(&c.PublishRateTarget, "publish-rate-target", DefaultPublishRateTarget, "batches a second the publishing streams together may send before the eventbus asks each to hold its batches (workers then merge their KV batches, delaying them up to 1 s) to its fair share of this rate (-1: never ask)")
	fs.Func("coalesce-events", fmt.Sprintf("event names, comma-separated, whose events a busy subject stores several to a message, for a fleet whose publishes NATS cannot store one by one (default none; a fleet of thousands of workers: %s). A coalesced event its publisher sends again after a lost acknowledgement may be stored twice", strings.Join(FleetCoalesceEvents, ",")), func(v string) error {
		c.CoalesceEvents = []string{}
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				c.CoalesceEvents = append(c.CoalesceEvents, n)
			}
		}
		return nil
	})
}

// Complete reads the files the settings name (the server's token and TLS
// files, the NATS client's TLS files). Start calls it, then Validate.
func (c *Config) Complete() error {
	if err := c.Server.Complete(); err != nil {
		return err
	}
	if err := c.NATSTLS.Complete(); err != nil {
		return fmt.Errorf("NATS TLS (--nats-ca, --nats-cert, --nats-key): %w", err)
	}
	return nil
}

// Validate reports the first invalid setting; it reads nothing and changes
// nothing.
func (c Config) Validate() error {
	if err := c.Server.Validate(); err != nil {
		return err
	}
	if c.StreamMaxAge <= 0 {
		return fmt.Errorf("--stream-max-age %s: must be positive", c.StreamMaxAge)
	}
	if c.DedupWindow < 0 || c.dedupWindow() > c.StreamMaxAge {
		return fmt.Errorf("--dedup-window %s: must be positive and at most --stream-max-age (%s)", c.DedupWindow, c.StreamMaxAge)
	}
	if c.NATSMaxReconnects < -1 {
		return fmt.Errorf("--nats-max-reconnects %d: valid values are -1 (forever) and 0 or more", c.NATSMaxReconnects)
	}
	if c.NATSReconnectWait < 0 {
		return fmt.Errorf("--nats-reconnect-wait %s: must not be negative", c.NATSReconnectWait)
	}
	if c.NATSReconnectBuffer < 0 {
		return fmt.Errorf("--nats-reconnect-buffer %d: must not be negative (0 is the default, %d bytes)", c.NATSReconnectBuffer, DefaultNATSReconnectBuffer)
	}
	if c.StreamReplicas < 0 || c.StreamReplicas > 5 {
		return fmt.Errorf("--stream-replicas %d: valid values are 1 to 5", c.StreamReplicas)
	}
	for _, n := range c.CoalesceEvents {
		if n == "" || strings.ContainsAny(n, ".*> \t") {
			return fmt.Errorf("--coalesce-events %q: %q is not an event name (a subject's last token)", strings.Join(c.CoalesceEvents, ","), n)
		}
	}
	if c.CoalesceGap < 0 || c.CoalesceGap > maxCoalesceGap {
		return fmt.Errorf("--coalesce-gap %s: must be 0 to %s", c.CoalesceGap, maxCoalesceGap)
	}
	if c.DeliverLinger > maxDeliverLinger {
		return fmt.Errorf("--deliver-linger %s: must be at most %s (negative: never wait)", c.DeliverLinger, maxDeliverLinger)
	}
	if c.NATSServer == "" {
		if c.DataDir == "" {
			return errors.New("--data-dir must not be empty when NATS_SERVER (--nats-server) is unset: the embedded nats-server stores JetStream there")
		}
		if c.EmbeddedNATSPort < -1 || c.EmbeddedNATSPort > 65535 {
			return fmt.Errorf("--embedded-nats-port %d: valid values are -1 (any free port) and 0-65535", c.EmbeddedNATSPort)
		}
		if c.NATSUser != "" || c.NATSPassword != "" || c.NATSToken != "" || c.NATSCreds != "" || c.NATSTLS.Enabled() {
			return errors.New("NATS credentials are set but NATS_SERVER (--nats-server) is empty: credentials apply to an external server only")
		}
		return nil
	}
	for _, u := range strings.Split(c.NATSServer, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u // nats.go takes host:port as a nats:// URL
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" {
			return fmt.Errorf("NATS_SERVER (--nats-server) %q: %q is not a URL such as nats://localhost:4222 (or host:port)", c.NATSServer, u)
		}
		switch pu.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("NATS_SERVER (--nats-server) %q: scheme %q: valid schemes are nats, tls, ws, wss", c.NATSServer, pu.Scheme)
		}
	}
	if c.NATSToken != "" && (c.NATSUser != "" || c.NATSCreds != "") {
		return errors.New("NATS_TOKEN (--nats-token) excludes NATS_USER and NATS_CREDS: give one kind of credentials")
	}
	if (c.NATSUser == "") != (c.NATSPassword == "") {
		return errors.New("NATS_USER (--nats-user) and NATS_PASSWORD (--nats-password) go together")
	}
	if err := c.NATSTLS.Validate(); err != nil {
		return fmt.Errorf("NATS TLS (--nats-ca, --nats-cert, --nats-key): %w", err)
	}
	return nil
}
