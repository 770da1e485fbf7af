package worker

import (
	"flag"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/obs"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// ProcessConfig is what every worker command (the mocker, the engine
// adapter) configures alike: how it reaches the registry and eventbus, its
// lease and drain, its request plane, its /metrics and /debug/pprof
// addresses and its KV event flags. A command's Config embeds it, so that
// its fields read as the command's own.
type ProcessConfig struct {
	RegistryAddr, EventbusAddr string
	// Security secures calls to the registry and eventbus: ClientTLS and
	// ClientAuth (the token sent).
	grpcclient.Security
	LeaseTTL, DrainTimeout time.Duration
	// Transport is read from DYN_REQUEST_PLANE and friends by Complete
	// when its Plane is empty.
	Transport transport.Config
	// KV is --kv-events-mode, --kv-events-ring, --kv-publish-interval and
	// --worker-api-addr.
	KV KVFlags
	// MetricsAddr serves /metrics; empty: off.
	MetricsAddr string
	// DebugAddr serves /debug/pprof, on loopback unless a host is given.
	DebugAddr string
	// Disagg is --disaggregation-mode: the role the worker registers.
	Disagg DisaggFlags
}

// ProcessEnvVars maps the flags of ProcessConfig that have documented
// environment variables to them (the rest take the command's prefix); a
// new map on each call, for the command to add its own to.
func ProcessEnvVars() map[string]string {
	return map[string]string{
		"registry-addr":          "SWITCHYARD_REGISTRY_ADDR",
		"eventbus-addr":          "SWITCHYARD_EVENTBUS_ADDR",
		"auth-token":             authtoken.EnvToken,
		"client-auth-token-file": authtoken.EnvTokenFile,
	}
}

// RegisterFlags adds --registry-addr, --eventbus-addr, --lease-ttl,
// --metrics-addr, --debug-addr, --drain-timeout, the --client-tls-* and
// client token flags, the KV event flags and --disaggregation-mode.
func (c *ProcessConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.RegistryAddr, "registry-addr", "localhost:7001", "registry address(es), comma-separated")
	fs.StringVar(&c.EventbusAddr, "eventbus-addr", "localhost:7002", "eventbus address(es), comma-separated")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 10*time.Second, "registry lease TTL")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "HTTP listen address for /metrics (empty: off)")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", obs.DebugFlagUsage)
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 30*time.Second, "bound on finishing in-flight requests at shutdown")
	c.Security.RegisterFlags(fs, "the registry and eventbus")
	c.KV.RegisterFlags(fs)
	c.Disagg.RegisterFlags(fs)
}

// Complete reads the request plane from DYN_REQUEST_PLANE and friends
// unless Transport is set, and the token and TLS files.
func (c *ProcessConfig) Complete() error {
	if err := c.Transport.Complete(); err != nil {
		return err
	}
	return c.Security.Complete()
}

// Validate checks the KV event flags, the request plane, the token and the
// TLS settings; it reads nothing and changes nothing.
func (c ProcessConfig) Validate() error {
	if err := c.KV.Validate(); err != nil {
		return err
	}
	if err := c.Disagg.Validate(); err != nil {
		return err
	}
	if err := c.Transport.Validate(); err != nil {
		return err
	}
	return c.Security.Validate()
}

// Apply sets w's registry, eventbus, credentials, token, request plane,
// lease TTL, drain timeout, KV event settings and role (the command sets
// the KV transfer that goes with a prefill or decode role); it loads the token and
// the TLS files.
func (c ProcessConfig) Apply(w *Config) error {
	creds, auth, err := c.Credentials()
	if err != nil {
		return err
	}
	w.RegistryAddr, w.EventbusAddr, w.Credentials, w.Token = c.RegistryAddr, c.EventbusAddr, creds, auth
	w.Transport, w.LeaseTTL, w.DrainTimeout = c.Transport, c.LeaseTTL, c.DrainTimeout
	c.KV.Apply(w)
	w.Role = c.Disagg.Role()
	return nil
}
