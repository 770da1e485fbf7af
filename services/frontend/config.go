package frontend

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/obs"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Config is the frontend's configuration.
type Config struct {
	// HTTPPort is --http-port, the port of the OpenAI API on every interface.
	HTTPPort int
	// HTTPAddr is --http-addr, a host:port that overrides HTTPPort (tests
	// use 127.0.0.1:0).
	HTTPAddr string
	// RouterMode is --router-mode: kv asks the router service; round-robin,
	// random and least-loaded pick in process.
	RouterMode string
	// NoKVEvents, with kv mode, routes in process with an approximate KV
	// index predicted from the frontend's own decisions, without the router
	// service or KV events.
	NoKVEvents bool
	// KVEventsMode is --kv-events-mode (pkg/kvevents): none is
	// --no-kv-events; jetstream, core and direct are the router service's
	// business (the frontend asks it), so they all route through it.
	KVEventsMode string
	// MigrationLimit is how many times one request may move to another
	// worker after its worker failed.
	MigrationLimit int
	// Namespace restricts the models and workers the frontend serves; empty
	// means every namespace.
	Namespace string
	// RegistryAddr, RouterAddr and EventbusAddr are comma lists of replicas.
	RegistryAddr, RouterAddr, EventbusAddr string
	// MaxInflightPerWorker makes the frontend answer 429 when every worker
	// of a model has this many of its requests in flight; 0 disables it.
	MaxInflightPerWorker int
	// APIKey and APIKeyFile enable bearer-token authentication of /v1/*.
	APIKey, APIKeyFile string
	// KeyRequestsPerMinute and KeyTokensPerMinute are each API key's
	// default limits (a key file line may set its own); 0 is no limit.
	// Tokens are prompt plus completion tokens.
	KeyRequestsPerMinute, KeyTokensPerMinute int
	// RateLimitClock, when set, is the API keys' buckets' time source
	// instead of time.Now: a test hook, so that a test of the limits does
	// not depend on how long its requests take. No flag sets it.
	RateLimitClock func() time.Time
	// ShutdownTimeout bounds how long open requests may finish at shutdown.
	ShutdownTimeout time.Duration
	// Security secures calls to the registry, router and eventbus:
	// ClientTLS and ClientAuth (the token sent).
	grpcclient.Security
	// NoStatusPage turns off GET /status and /status.json.
	NoStatusPage bool
	// DebugAddr is --debug-addr: pprof, on loopback unless a host is given.
	DebugAddr string
	// Core tunes the in-process router (the --router-mode other than kv,
	// --no-kv-events, and the fallback when the router service is away); its
	// Mode and Approximate follow RouterMode and NoKVEvents.
	Core core.Config
	// Transport is the request plane. When its Plane is empty, Complete
	// reads it from DYN_REQUEST_PLANE and friends.
	Transport transport.Config

	// ChatPrefixCacheBytes is --chat-prefix-cache-bytes, the memory budget
	// of the chat prefix cache (promptcache.go); 0 turns it off.
	ChatPrefixCacheBytes int64

	// HTTPReadTimeout is --http-read-timeout: a request's headers must
	// arrive within it, and then its body within it again; past either the
	// connection is closed (the body's with a 408 answer). 0 is no bound.
	HTTPReadTimeout time.Duration
	// HTTPIdleTimeout is --http-idle-timeout: a keep-alive connection with
	// no request for this long is closed. 0 is no bound.
	HTTPIdleTimeout time.Duration
	// MaxConnsPerClient is --max-conns-per-client: connections one client
	// address may hold open at once; past it a new connection is answered
	// 429 and closed. 0 is no bound.
	MaxConnsPerClient int

	// HandoffDeadline is --handoff-deadline: a two-leg request's prefill
	// leg must answer with its KV handoff, and then its decode leg give
	// its first token, each within it; past it the leg is cancelled and
	// the request routed again with its prefill elsewhere or local.
	HandoffDeadline time.Duration

	// Admission is admission control (admission.go).
	Admission AdmissionConfig

	// CORSOrigins is --cors-origins, a comma list of origins browsers may
	// call the API from ("*" for any); empty sends no CORS headers.
	CORSOrigins string

	// keys holds the SHA-256, name and limits of each accepted API key (a
	// file may list a key in clear or as "sha256:<hex>"), filled by
	// Complete; nil when no key is configured.
	keys *keyring
	// corsOrigins is CORSOrigins as a set, filled by Complete.
	corsOrigins map[string]bool
}

// EnvVars maps flags to their environment variables.
var EnvVars = map[string]string{
	"registry-addr":          "SWITCHYARD_REGISTRY_ADDR",
	"router-addr":            "SWITCHYARD_ROUTER_ADDR",
	"eventbus-addr":          "SWITCHYARD_EVENTBUS_ADDR",
	"auth-token":             authtoken.EnvToken,
	"client-auth-token-file": authtoken.EnvTokenFile,
}

var frontendModes = []core.Mode{core.ModeKV, core.ModeRoundRobin, core.ModeRandom, core.ModeLeastLoaded}

// RegisterFlags adds the frontend's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.HTTPPort, "http-port", 8000, "port of the OpenAI-compatible HTTP API")
	fs.StringVar(&c.HTTPAddr, "http-addr", "", "host:port of the HTTP API; overrides --http-port when set")
	fs.StringVar(&c.RouterMode, "router-mode", string(core.ModeKV), "routing mode: kv (router service), round-robin, random, least-loaded (in process)")
	fs.BoolVar(&c.NoKVEvents, "no-kv-events", false, "kv mode: route in process on caches predicted from this frontend's decisions, without the router service")
	kvevents.RegisterAlias(fs, &c.NoKVEvents)
	fs.StringVar(&c.KVEventsMode, "kv-events-mode", string(kvevents.JetStream), kvevents.Usage+"; the frontend routes in process on none, through the router service otherwise")
	fs.IntVar(&c.MigrationLimit, "migration-limit", 3, "times a request may move to another worker when its worker fails mid-stream")
	fs.StringVar(&c.Namespace, "namespace", "", "serve only models and workers of this namespace (empty: all)")
	fs.StringVar(&c.RegistryAddr, "registry-addr", "localhost:7001", "registry address(es), comma-separated")
	fs.StringVar(&c.RouterAddr, "router-addr", "localhost:7003", "router address(es), comma-separated")
	fs.StringVar(&c.EventbusAddr, "eventbus-addr", "localhost:7002", "eventbus address(es), comma-separated")
	fs.IntVar(&c.MaxInflightPerWorker, "max-inflight-per-worker", 0, "answer 429 when every worker of a model has this many requests in flight (0: no limit)")
	fs.StringVar(&c.APIKey, "api-key", "", "require Authorization: Bearer with this key on /v1/*")
	fs.StringVar(&c.APIKeyFile, "api-key-file", "", "file of accepted API keys, one per line, in clear or as sha256:<64 hex digits>, then optional name=NAME rpm=N tpm=N priority=N")
	fs.IntVar(&c.KeyRequestsPerMinute, "key-requests-per-minute", 0, "requests per minute each API key may make (token bucket; a key file line's rpm= overrides; 0: no limit)")
	fs.IntVar(&c.KeyTokensPerMinute, "key-tokens-per-minute", 0, "prompt plus completion tokens per minute each API key may use (token bucket; a key file line's tpm= overrides; 0: no limit)")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", obs.DebugFlagUsage)
	fs.BoolVar(&c.NoStatusPage, "no-status-page", false, "do not serve the live status page GET /status (and /status.json)")
	fs.StringVar(&c.CORSOrigins, "cors-origins", "", `origins browsers may call the API from, comma-separated ("*": any); empty: no CORS`)
	fs.Int64Var(&c.ChatPrefixCacheBytes, "chat-prefix-cache-bytes", 256<<20, "memory budget of the chat prefix cache, which lets the next turn of a conversation reuse the tokens of the last (0: off)")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", 30*time.Second, "bound on reading a request's headers, and then its body; past it the connection is closed (0: no bound)")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", 120*time.Second, "close a keep-alive connection idle this long (0: no bound)")
	fs.IntVar(&c.MaxConnsPerClient, "max-conns-per-client", 1024, "connections one client address may hold open at once; past it new ones are answered 429 and closed (0: no bound)")
	fs.DurationVar(&c.HandoffDeadline, "handoff-deadline", 5*time.Second, "disaggregated requests: bound on the prefill leg's KV handoff and then on the decode leg's first token; past it the request is routed again with its prefill on another worker or local")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "bound on finishing open requests at shutdown")
	c.Security.RegisterFlags(fs, "the registry, router and eventbus")
	c.Core = core.DefaultConfig()
	c.Core.RegisterFlags(fs)
	c.Admission.RegisterFlags(fs)
}

// Complete reads what the settings name: the request plane from
// DYN_REQUEST_PLANE and friends unless Transport is set, the API keys
// (--api-key and --api-key-file), and the token and TLS files. It fills the
// derived sets the server uses. Start calls it, then Validate.
func (c *Config) Complete() error {
	if err := c.Transport.Complete(); err != nil {
		return err
	}
	c.corsOrigins = nil
	for _, o := range splitAddrs(c.CORSOrigins) {
		if c.corsOrigins == nil {
			c.corsOrigins = map[string]bool{}
		}
		c.corsOrigins[strings.TrimSuffix(o, "/")] = true
	}
	keys, err := c.readKeys()
	if err != nil {
		return err
	}
	c.keys = keys
	return c.Security.Complete()
}

// Validate checks the configuration; it reads nothing and changes nothing.
func (c Config) Validate() error {
	if _, err := c.mode(); err != nil {
		return err
	}
	if err := c.Core.Validate(); err != nil {
		return err
	}
	if err := c.Admission.Validate(); err != nil {
		return err
	}
	switch {
	case c.HTTPAddr == "" && (c.HTTPPort < 0 || c.HTTPPort > 65535):
		return fmt.Errorf("invalid --http-port %d: valid values are 0..65535", c.HTTPPort)
	case c.MigrationLimit < 0:
		return fmt.Errorf("invalid --migration-limit %d: it must not be negative", c.MigrationLimit)
	case c.KeyRequestsPerMinute < 0:
		return fmt.Errorf("invalid --key-requests-per-minute %d: it must not be negative", c.KeyRequestsPerMinute)
	case c.KeyTokensPerMinute < 0:
		return fmt.Errorf("invalid --key-tokens-per-minute %d: it must not be negative", c.KeyTokensPerMinute)
	case c.MaxInflightPerWorker < 0:
		return fmt.Errorf("invalid --max-inflight-per-worker %d: it must not be negative", c.MaxInflightPerWorker)
	case c.ChatPrefixCacheBytes < 0:
		return fmt.Errorf("invalid --chat-prefix-cache-bytes %d: it must not be negative", c.ChatPrefixCacheBytes)
	case c.HTTPReadTimeout < 0:
		return fmt.Errorf("invalid --http-read-timeout %s: it must not be negative", c.HTTPReadTimeout)
	case c.HTTPIdleTimeout < 0:
		return fmt.Errorf("invalid --http-idle-timeout %s: it must not be negative", c.HTTPIdleTimeout)
	case c.MaxConnsPerClient < 0:
		return fmt.Errorf("invalid --max-conns-per-client %d: it must not be negative", c.MaxConnsPerClient)
	case c.HandoffDeadline <= 0:
		return fmt.Errorf("invalid --handoff-deadline %s: it must be positive", c.HandoffDeadline)
	case c.ShutdownTimeout < 0:
		return errors.New("--shutdown-timeout must not be negative")
	case len(splitAddrs(c.RegistryAddr)) == 0:
		return errors.New("--registry-addr (SWITCHYARD_REGISTRY_ADDR) is required")
	case c.eventsModeErr() != nil:
		return c.eventsModeErr()
	case len(splitAddrs(c.EventbusAddr)) == 0:
		return errors.New("--eventbus-addr (SWITCHYARD_EVENTBUS_ADDR) is required")
	case c.usesRouterService() && len(splitAddrs(c.RouterAddr)) == 0:
		return errors.New("--router-addr (SWITCHYARD_ROUTER_ADDR) is required in kv mode")
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return fmt.Errorf("invalid --http-addr %q: %v", c.HTTPAddr, err)
		}
	}
	if err := c.Transport.Validate(); err != nil {
		return err
	}
	return c.Security.Validate()
}

// mode parses --router-mode; direct mode is the router's, not the frontend's.
func (c Config) mode() (core.Mode, error) {
	return core.ParseModeOf(c.RouterMode, frontendModes)
}

// usesRouterService reports whether requests are routed by the router service.
func (c Config) usesRouterService() bool {
	m, _ := c.mode()
	return m == core.ModeKV && !c.approximate()
}

// approximate reports whether kv mode predicts caches in process: with
// --no-kv-events, --no-router-kv-events or --kv-events-mode none.
func (c Config) approximate() bool {
	m, err := kvevents.Flags{Mode: c.KVEventsMode, NoEvents: c.NoKVEvents}.Resolve()
	return err == nil && m == kvevents.None
}

func (c Config) eventsModeErr() error {
	_, err := kvevents.Parse(c.KVEventsMode)
	return err
}

// listenAddr is where the HTTP API binds.
func (c Config) listenAddr() string {
	if c.HTTPAddr != "" {
		return c.HTTPAddr
	}
	return ":" + strconv.Itoa(c.HTTPPort)
}

// splitAddrs splits a comma list of addresses.
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
