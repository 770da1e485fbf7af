package transport

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config selects the request plane and holds every plane's settings. Start
// from [DefaultConfig] or [ConfigFromEnv]; the zero value is not usable.
type Config struct {
	// Plane is the request plane in use (DYN_REQUEST_PLANE, or its first
	// element when it is a list): what a server serves and what a client
	// prefers when a worker serves several.
	Plane Plane
	// Planes, when set, lists every plane a server serves, Plane first
	// (DYN_REQUEST_PLANE=tcp,http serves both and registers both
	// addresses). Empty means Plane alone. Clients ignore it: they speak
	// every plane.
	Planes []Plane
	// Limits bound every plane's calls and streams.
	Limits Limits
	// TCP holds the tcp plane's settings.
	TCP TCPConfig
	// HTTP holds the http plane's settings.
	HTTP HTTPConfig
	// NATS holds the nats plane's settings.
	NATS NATSConfig
}

// Limits are the settings every request plane applies to its calls and
// streams. Their environment variables keep the names Dynamo gives them,
// DYN_TCP_*, and mean the same on every plane.
type Limits struct {
	// MaxMessageSize bounds every request and response payload, in bytes
	// (DYN_TCP_MAX_MESSAGE_SIZE; default 32 MiB).
	MaxMessageSize int
	// RequestTimeout bounds the wait for a call's first response
	// (DYN_TCP_REQUEST_TIMEOUT; default 10 s).
	RequestTimeout time.Duration
	// ConnectTimeout bounds establishing a connection
	// (DYN_TCP_CONNECT_TIMEOUT; default 3 s).
	ConnectTimeout time.Duration
	// ChannelBuffer is the per-stream response window: the most responses
	// in flight to a client before the handler's Send blocks
	// (DYN_TCP_CHANNEL_BUFFER; default 100). The http plane's flow control
	// is HTTP/2's own.
	ChannelBuffer int
}

// TCPConfig holds the tcp plane's settings.
type TCPConfig struct {
	// Host is the address the server binds and advertises
	// (DYN_TCP_RPC_HOST; default: a non-loopback IPv4 of the machine, else
	// 127.0.0.1).
	Host string
	// Port is the server's port (DYN_TCP_RPC_PORT; default 0, OS-assigned).
	Port int
	// PoolSize is the most connections the client keeps per server
	// address (DYN_TCP_POOL_SIZE; default 50).
	PoolSize int
}

// HTTPConfig holds the http plane's settings.
type HTTPConfig struct {
	// Host is the address the server binds and advertises
	// (DYN_HTTP_RPC_HOST; default: as for DYN_TCP_RPC_HOST).
	Host string
	// Port is the server's port (DYN_HTTP_RPC_PORT; default 8888; 0 picks one).
	Port int
	// RootPath prefixes every endpoint path (DYN_HTTP_RPC_ROOT_PATH; default /v1/rpc).
	RootPath string
	// MaxFrameSize is the largest HTTP/2 frame the client accepts,
	// advertised in its SETTINGS (DYN_HTTP2_MAX_FRAME_SIZE; default 1 MiB).
	MaxFrameSize int
	// MaxConcurrentStreams caps the client's in-flight requests
	// (DYN_HTTP2_MAX_CONCURRENT_STREAMS; default 1000).
	MaxConcurrentStreams int
	// PoolMaxIdlePerHost caps idle connections kept per server
	// (DYN_HTTP2_POOL_MAX_IDLE_PER_HOST; default 100).
	PoolMaxIdlePerHost int
	// PoolIdleTimeout closes connections idle this long
	// (DYN_HTTP2_POOL_IDLE_TIMEOUT_SECS; default 90 s).
	PoolIdleTimeout time.Duration
	// KeepAliveInterval sends a PING after this long without a frame
	// received (DYN_HTTP2_KEEP_ALIVE_INTERVAL_SECS; default 30 s).
	KeepAliveInterval time.Duration
	// KeepAliveTimeout closes the connection when a PING is not answered
	// within it (DYN_HTTP2_KEEP_ALIVE_TIMEOUT_SECS; default 10 s).
	KeepAliveTimeout time.Duration
	// AdaptiveWindow keeps large receive windows when true and pins them to
	// the RFC 7540 initial 64 KiB when false (DYN_HTTP2_ADAPTIVE_WINDOW;
	// default true). See newHTTPTransport for why.
	AdaptiveWindow bool
}

// NATSConfig holds the nats plane's settings.
type NATSConfig struct {
	// URL is the NATS server, or a comma-separated list of them
	// (NATS_SERVER; default nats://localhost:4222).
	URL string
	// Subject maps an endpoint to the subject the server subscribes to and
	// advertises. The default is "switchyard.{endpoint}.{instance hex}";
	// the SDK sets "{namespace}.{component}.{endpoint}.{instance hex}".
	Subject func(endpoint string) string
	// HeartbeatInterval is how often the server signals liveness on each
	// open stream; a client declares the stream disconnected after three
	// intervals of silence. It has no environment variable; default 1 s.
	HeartbeatInterval time.Duration
}

// Defaults from the seed documents.
const (
	DefaultTCPPort           = 0
	DefaultMaxMessageSize    = 32 << 20
	DefaultRequestTimeout    = 10 * time.Second
	DefaultPoolSize          = 50
	DefaultConnectTimeout    = 3 * time.Second
	DefaultChannelBuffer     = 100
	DefaultHTTPPort          = 8888
	DefaultHTTPRootPath      = "/v1/rpc"
	DefaultHTTP2FrameSize    = 1 << 20
	DefaultHTTP2Streams      = 1000
	DefaultHTTP2IdlePerHost  = 100
	DefaultHTTP2IdleTimeout  = 90 * time.Second
	DefaultHTTP2KeepAlive    = 30 * time.Second
	DefaultHTTP2PingTimeout  = 10 * time.Second
	DefaultNATSURL           = "nats://localhost:4222"
	DefaultNATSHeartbeat     = time.Second
	minHTTP2FrameSize        = 16 << 10
	maxHTTP2FrameSize        = 1<<24 - 1
	maxMessageSizeUpperBound = 1<<31 - 1
)

// DefaultConfig returns the configuration with every variable unset. The
// hosts are auto-detected.
func DefaultConfig() Config {
	host := DetectHost()
	return Config{
		Plane: PlaneTCP,
		Limits: Limits{
			MaxMessageSize: DefaultMaxMessageSize,
			RequestTimeout: DefaultRequestTimeout,
			ConnectTimeout: DefaultConnectTimeout,
			ChannelBuffer:  DefaultChannelBuffer,
		},
		TCP: TCPConfig{
			Host:     host,
			Port:     DefaultTCPPort,
			PoolSize: DefaultPoolSize,
		},
		HTTP: HTTPConfig{
			Host:                 host,
			Port:                 DefaultHTTPPort,
			RootPath:             DefaultHTTPRootPath,
			MaxFrameSize:         DefaultHTTP2FrameSize,
			MaxConcurrentStreams: DefaultHTTP2Streams,
			PoolMaxIdlePerHost:   DefaultHTTP2IdlePerHost,
			PoolIdleTimeout:      DefaultHTTP2IdleTimeout,
			KeepAliveInterval:    DefaultHTTP2KeepAlive,
			KeepAliveTimeout:     DefaultHTTP2PingTimeout,
			AdaptiveWindow:       true,
		},
		NATS: NATSConfig{URL: DefaultNATSURL, HeartbeatInterval: DefaultNATSHeartbeat},
	}
}

// DetectHost returns a non-loopback IPv4 address of this machine, or
// 127.0.0.1 if it has none.
func DetectHost() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip4 := ipn.IP.To4(); ip4 != nil && !ip4.IsLoopback() && !ip4.IsLinkLocalUnicast() {
					return ip4.String()
				}
			}
		}
	}
	return "127.0.0.1"
}

// ConfigFromEnv reads DYN_REQUEST_PLANE, DYN_TCP_*, DYN_HTTP_RPC_*,
// DYN_HTTP2_* and NATS_SERVER over [DefaultConfig]. An unset or empty
// variable keeps its default; an invalid one is an error naming the
// variable, the value and what is valid.
func ConfigFromEnv() (Config, error) {
	return ConfigFromLookup(os.LookupEnv)
}

// Complete fills an unset configuration (no Plane) from the environment,
// as [ConfigFromEnv] reads it; a configuration with a Plane is kept as it
// is. Service configs call it from their own Complete.
func (c *Config) Complete() error {
	if c.Plane != "" {
		return nil
	}
	tc, err := ConfigFromEnv()
	if err != nil {
		return err
	}
	*c = tc
	return nil
}

// ConfigFromLookup is [ConfigFromEnv] with the environment supplied by lookup.
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	c := DefaultConfig()
	p := envParser{lookup: lookup}
	if v, ok := p.get("DYN_REQUEST_PLANE"); ok {
		planes, err := ParsePlanes(v)
		if err != nil {
			p.fail("DYN_REQUEST_PLANE", v, validPlanes+", or a comma-separated list of them without repeats")
		} else {
			c.Plane = planes[0]
			if len(planes) > 1 {
				c.Planes = planes
			}
		}
	}
	p.host("DYN_TCP_RPC_HOST", &c.TCP.Host)
	p.port("DYN_TCP_RPC_PORT", &c.TCP.Port)
	p.intRange("DYN_TCP_MAX_MESSAGE_SIZE", &c.Limits.MaxMessageSize, 1, maxMessageSizeUpperBound)
	p.duration("DYN_TCP_REQUEST_TIMEOUT", &c.Limits.RequestTimeout)
	p.intRange("DYN_TCP_POOL_SIZE", &c.TCP.PoolSize, 1, 1<<16)
	p.duration("DYN_TCP_CONNECT_TIMEOUT", &c.Limits.ConnectTimeout)
	p.intRange("DYN_TCP_CHANNEL_BUFFER", &c.Limits.ChannelBuffer, 1, 1<<20)

	if _, set := p.get("DYN_TCP_RPC_HOST"); set {
		// An explicit TCP host is the better guess for HTTP than detection.
		c.HTTP.Host = c.TCP.Host
	}
	p.host("DYN_HTTP_RPC_HOST", &c.HTTP.Host)
	p.port("DYN_HTTP_RPC_PORT", &c.HTTP.Port)
	if v, ok := p.get("DYN_HTTP_RPC_ROOT_PATH"); ok {
		if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "?# ") {
			p.fail("DYN_HTTP_RPC_ROOT_PATH", v, "an absolute URL path such as /v1/rpc")
		} else {
			c.HTTP.RootPath = strings.TrimRight(v, "/")
		}
	}
	p.intRange("DYN_HTTP2_MAX_FRAME_SIZE", &c.HTTP.MaxFrameSize, minHTTP2FrameSize, maxHTTP2FrameSize)
	p.intRange("DYN_HTTP2_MAX_CONCURRENT_STREAMS", &c.HTTP.MaxConcurrentStreams, 1, 1<<20)
	p.intRange("DYN_HTTP2_POOL_MAX_IDLE_PER_HOST", &c.HTTP.PoolMaxIdlePerHost, 0, 1<<20)
	p.seconds("DYN_HTTP2_POOL_IDLE_TIMEOUT_SECS", &c.HTTP.PoolIdleTimeout)
	p.seconds("DYN_HTTP2_KEEP_ALIVE_INTERVAL_SECS", &c.HTTP.KeepAliveInterval)
	p.seconds("DYN_HTTP2_KEEP_ALIVE_TIMEOUT_SECS", &c.HTTP.KeepAliveTimeout)
	if v, ok := p.get("DYN_HTTP2_ADAPTIVE_WINDOW"); ok {
		b, err := strconv.ParseBool(strings.ToLower(v))
		if err != nil {
			p.fail("DYN_HTTP2_ADAPTIVE_WINDOW", v, "true or false")
		}
		c.HTTP.AdaptiveWindow = b
	}
	if v, ok := p.get("NATS_SERVER"); ok {
		if err := validateNATSURL(v); err != nil {
			p.fail("NATS_SERVER", v, "nats://host:port (tls, ws, wss also accepted), comma-separated")
		} else {
			c.NATS.URL = v
		}
	}
	if p.err != nil {
		return Config{}, p.err
	}
	return c, nil
}

// ParsePlanes parses a comma-separated list of plane names
// case-insensitively: "tcp", "tcp,http". A name may appear once.
func ParsePlanes(s string) ([]Plane, error) {
	var out []Plane
	for _, part := range strings.Split(s, ",") {
		p, err := ParsePlane(part)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("transport: request plane %q listed twice in %q", p, s)
		}
		out = append(out, p)
	}
	return out, nil
}

// ServedPlanes is every plane a server of c serves: Planes, or Plane alone.
func (c Config) ServedPlanes() []Plane {
	if len(c.Planes) == 0 {
		return []Plane{c.Plane}
	}
	return c.Planes
}

// Validate reports the first setting that no plane could run with.
func (c Config) Validate() error {
	if _, err := ParsePlane(string(c.Plane)); err != nil {
		return err
	}
	if len(c.Planes) > 0 {
		var names []string
		for _, p := range c.Planes {
			names = append(names, string(p))
		}
		planes, err := ParsePlanes(strings.Join(names, ","))
		if err != nil {
			return err
		}
		if planes[0] != c.Plane {
			return fmt.Errorf("transport: Planes %v must start with Plane %q", c.Planes, c.Plane)
		}
	}
	switch {
	case c.Limits.MaxMessageSize <= 0:
		return fmt.Errorf("transport: Limits.MaxMessageSize must be positive, got %d", c.Limits.MaxMessageSize)
	case c.Limits.RequestTimeout <= 0:
		return fmt.Errorf("transport: Limits.RequestTimeout must be positive, got %v", c.Limits.RequestTimeout)
	case c.Limits.ConnectTimeout <= 0:
		return fmt.Errorf("transport: Limits.ConnectTimeout must be positive, got %v", c.Limits.ConnectTimeout)
	case c.TCP.PoolSize <= 0:
		return fmt.Errorf("transport: TCP.PoolSize must be positive, got %d", c.TCP.PoolSize)
	case c.Limits.ChannelBuffer <= 0:
		return fmt.Errorf("transport: Limits.ChannelBuffer must be positive, got %d", c.Limits.ChannelBuffer)
	case c.HTTP.MaxConcurrentStreams <= 0:
		return fmt.Errorf("transport: HTTP.MaxConcurrentStreams must be positive, got %d", c.HTTP.MaxConcurrentStreams)
	}
	return nil
}

func validateNATSURL(v string) error {
	for _, u := range strings.Split(v, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			return err
		}
		switch pu.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("bad scheme %q", pu.Scheme)
		}
		if pu.Host == "" {
			return fmt.Errorf("no host in %q", u)
		}
	}
	return nil
}

// envParser collects the first invalid variable.
type envParser struct {
	lookup func(string) (string, bool)
	err    error
}

func (p *envParser) get(name string) (string, bool) {
	v, ok := p.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	return strings.TrimSpace(v), true
}

func (p *envParser) fail(name, value, valid string) {
	if p.err == nil {
		p.err = fmt.Errorf("transport: invalid %s=%q (valid: %s)", name, value, valid)
	}
}

func (p *envParser) host(name string, dst *string) {
	v, ok := p.get(name)
	if !ok {
		return
	}
	if strings.ContainsAny(v, "/: ") && net.ParseIP(v) == nil {
		p.fail(name, v, "a host name or IP address without a port")
		return
	}
	*dst = v
}

func (p *envParser) port(name string, dst *int) {
	p.intRange(name, dst, 0, 65535)
}

func (p *envParser) intRange(name string, dst *int, lo, hi int) {
	v, ok := p.get(name)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.fail(name, v, fmt.Sprintf("an integer from %d to %d", lo, hi))
		return
	}
	*dst = n
}

// duration accepts whole seconds ("10") or a Go duration ("500ms").
func (p *envParser) duration(name string, dst *time.Duration) {
	v, ok := p.get(name)
	if !ok {
		return
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		*dst = time.Duration(n) * time.Second
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.fail(name, v, "a positive number of seconds or a duration such as 500ms")
		return
	}
	*dst = d
}

func (p *envParser) seconds(name string, dst *time.Duration) {
	v, ok := p.get(name)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > 1<<31 {
		p.fail(name, v, "a positive whole number of seconds")
		return
	}
	*dst = time.Duration(n) * time.Second
}

// LogValue renders the effective configuration for a single startup log
// line.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("plane", string(c.Plane)),
		slog.Any("planes", c.ServedPlanes()),
		// The limits are logged with the tcp settings, as the DYN_TCP_*
		// variables that set them are named.
		slog.Group("tcp",
			slog.String("host", c.TCP.Host), slog.Int("port", c.TCP.Port),
			slog.Int("max_message_size", c.Limits.MaxMessageSize),
			slog.Duration("request_timeout", c.Limits.RequestTimeout),
			slog.Int("pool_size", c.TCP.PoolSize),
			slog.Duration("connect_timeout", c.Limits.ConnectTimeout),
			slog.Int("channel_buffer", c.Limits.ChannelBuffer)),
		slog.Group("http",
			slog.String("host", c.HTTP.Host), slog.Int("port", c.HTTP.Port),
			slog.String("root_path", c.HTTP.RootPath),
			slog.Int("max_frame_size", c.HTTP.MaxFrameSize),
			slog.Int("max_concurrent_streams", c.HTTP.MaxConcurrentStreams),
			slog.Int("pool_max_idle_per_host", c.HTTP.PoolMaxIdlePerHost),
			slog.Duration("pool_idle_timeout", c.HTTP.PoolIdleTimeout),
			slog.Duration("keep_alive_interval", c.HTTP.KeepAliveInterval),
			slog.Duration("keep_alive_timeout", c.HTTP.KeepAliveTimeout),
			slog.Bool("adaptive_window", c.HTTP.AdaptiveWindow)),
		slog.Group("nats",
			slog.String("url", c.NATS.URL),
			slog.Duration("heartbeat_interval", c.NATS.HeartbeatInterval)),
	)
}
