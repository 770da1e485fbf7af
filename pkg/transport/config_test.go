package transport

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := ConfigFromLookup(lookupFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	if diff := cmp.Diff(want.TCP, cfg.TCP); diff != "" {
		t.Errorf("TCP defaults (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.HTTP, cfg.HTTP); diff != "" {
		t.Errorf("HTTP defaults (-want +got):\n%s", diff)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"plane", cfg.Plane, PlaneTCP},
		{"tcp port", cfg.TCP.Port, 0},
		{"max message", cfg.Limits.MaxMessageSize, 32 << 20},
		{"request timeout", cfg.Limits.RequestTimeout, 10 * time.Second},
		{"pool", cfg.TCP.PoolSize, 50},
		{"connect timeout", cfg.Limits.ConnectTimeout, 3 * time.Second},
		{"channel buffer", cfg.Limits.ChannelBuffer, 100},
		{"http port", cfg.HTTP.Port, 8888},
		{"root path", cfg.HTTP.RootPath, "/v1/rpc"},
		{"frame size", cfg.HTTP.MaxFrameSize, 1 << 20},
		{"streams", cfg.HTTP.MaxConcurrentStreams, 1000},
		{"idle per host", cfg.HTTP.PoolMaxIdlePerHost, 100},
		{"idle timeout", cfg.HTTP.PoolIdleTimeout, 90 * time.Second},
		{"keep-alive", cfg.HTTP.KeepAliveInterval, 30 * time.Second},
		{"keep-alive timeout", cfg.HTTP.KeepAliveTimeout, 10 * time.Second},
		{"adaptive", cfg.HTTP.AdaptiveWindow, true},
		{"nats", cfg.NATS.URL, "nats://localhost:4222"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if cfg.TCP.Host == "" || cfg.TCP.Host == "0.0.0.0" {
		t.Errorf("auto-detected host %q", cfg.TCP.Host)
	}
}

func TestConfigFromEnvValid(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		check func(Config) any
		want  any
	}{
		{"plane tcp", map[string]string{"DYN_REQUEST_PLANE": "tcp"}, func(c Config) any { return c.Plane }, PlaneTCP},
		{"plane HTTP upper", map[string]string{"DYN_REQUEST_PLANE": "HTTP"}, func(c Config) any { return c.Plane }, PlaneHTTP},
		{"plane Nats mixed", map[string]string{"DYN_REQUEST_PLANE": "Nats"}, func(c Config) any { return c.Plane }, PlaneNATS},
		{"plane empty is default", map[string]string{"DYN_REQUEST_PLANE": ""}, func(c Config) any { return c.Plane }, PlaneTCP},
		{"tcp host", map[string]string{"DYN_TCP_RPC_HOST": "10.1.2.3"}, func(c Config) any { return c.TCP.Host }, "10.1.2.3"},
		{"tcp host name", map[string]string{"DYN_TCP_RPC_HOST": "worker-0.local"}, func(c Config) any { return c.TCP.Host }, "worker-0.local"},
		{"tcp host ipv6", map[string]string{"DYN_TCP_RPC_HOST": "::1"}, func(c Config) any { return c.TCP.Host }, "::1"},
		{"tcp port", map[string]string{"DYN_TCP_RPC_PORT": "9000"}, func(c Config) any { return c.TCP.Port }, 9000},
		{"tcp port max", map[string]string{"DYN_TCP_RPC_PORT": "65535"}, func(c Config) any { return c.TCP.Port }, 65535},
		{"max message", map[string]string{"DYN_TCP_MAX_MESSAGE_SIZE": "1048576"}, func(c Config) any { return c.Limits.MaxMessageSize }, 1 << 20},
		{"request timeout secs", map[string]string{"DYN_TCP_REQUEST_TIMEOUT": "30"}, func(c Config) any { return c.Limits.RequestTimeout }, 30 * time.Second},
		{"request timeout duration", map[string]string{"DYN_TCP_REQUEST_TIMEOUT": "250ms"}, func(c Config) any { return c.Limits.RequestTimeout }, 250 * time.Millisecond},
		{"pool", map[string]string{"DYN_TCP_POOL_SIZE": "8"}, func(c Config) any { return c.TCP.PoolSize }, 8},
		{"connect timeout", map[string]string{"DYN_TCP_CONNECT_TIMEOUT": "1"}, func(c Config) any { return c.Limits.ConnectTimeout }, time.Second},
		{"channel buffer", map[string]string{"DYN_TCP_CHANNEL_BUFFER": "16"}, func(c Config) any { return c.Limits.ChannelBuffer }, 16},
		{"http host", map[string]string{"DYN_HTTP_RPC_HOST": "0.0.0.0"}, func(c Config) any { return c.HTTP.Host }, "0.0.0.0"},
		{"http host follows tcp host", map[string]string{"DYN_TCP_RPC_HOST": "10.0.0.9"}, func(c Config) any { return c.HTTP.Host }, "10.0.0.9"},
		{"http port", map[string]string{"DYN_HTTP_RPC_PORT": "8080"}, func(c Config) any { return c.HTTP.Port }, 8080},
		{"root path", map[string]string{"DYN_HTTP_RPC_ROOT_PATH": "/rpc/"}, func(c Config) any { return c.HTTP.RootPath }, "/rpc"},
		{"frame size", map[string]string{"DYN_HTTP2_MAX_FRAME_SIZE": "16384"}, func(c Config) any { return c.HTTP.MaxFrameSize }, 16384},
		{"streams", map[string]string{"DYN_HTTP2_MAX_CONCURRENT_STREAMS": "64"}, func(c Config) any { return c.HTTP.MaxConcurrentStreams }, 64},
		{"idle per host", map[string]string{"DYN_HTTP2_POOL_MAX_IDLE_PER_HOST": "0"}, func(c Config) any { return c.HTTP.PoolMaxIdlePerHost }, 0},
		{"idle timeout", map[string]string{"DYN_HTTP2_POOL_IDLE_TIMEOUT_SECS": "5"}, func(c Config) any { return c.HTTP.PoolIdleTimeout }, 5 * time.Second},
		{"keep-alive", map[string]string{"DYN_HTTP2_KEEP_ALIVE_INTERVAL_SECS": "2"}, func(c Config) any { return c.HTTP.KeepAliveInterval }, 2 * time.Second},
		{"keep-alive timeout", map[string]string{"DYN_HTTP2_KEEP_ALIVE_TIMEOUT_SECS": "3"}, func(c Config) any { return c.HTTP.KeepAliveTimeout }, 3 * time.Second},
		{"adaptive false", map[string]string{"DYN_HTTP2_ADAPTIVE_WINDOW": "false"}, func(c Config) any { return c.HTTP.AdaptiveWindow }, false},
		{"adaptive TRUE", map[string]string{"DYN_HTTP2_ADAPTIVE_WINDOW": "TRUE"}, func(c Config) any { return c.HTTP.AdaptiveWindow }, true},
		{"nats", map[string]string{"NATS_SERVER": "nats://n1:4222,nats://n2:4222"}, func(c Config) any { return c.NATS.URL }, "nats://n1:4222,nats://n2:4222"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ConfigFromLookup(lookupFrom(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.check(cfg); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigFromEnvInvalid(t *testing.T) {
	tests := []struct{ name, value, valid string }{
		{"DYN_REQUEST_PLANE", "grpc", "tcp, http, nats"},
		{"DYN_REQUEST_PLANE", "tcp2", "tcp, http, nats"},
		{"DYN_TCP_RPC_HOST", "host:99", "host name"},
		{"DYN_TCP_RPC_HOST", "http://x", "host name"},
		{"DYN_TCP_RPC_PORT", "-1", "0 to 65535"},
		{"DYN_TCP_RPC_PORT", "65536", "0 to 65535"},
		{"DYN_TCP_RPC_PORT", "eighty", "0 to 65535"},
		{"DYN_TCP_MAX_MESSAGE_SIZE", "0", "integer"},
		{"DYN_TCP_MAX_MESSAGE_SIZE", "32MiB", "integer"},
		{"DYN_TCP_REQUEST_TIMEOUT", "0", "positive"},
		{"DYN_TCP_REQUEST_TIMEOUT", "-5s", "positive"},
		{"DYN_TCP_REQUEST_TIMEOUT", "soon", "positive"},
		{"DYN_TCP_POOL_SIZE", "0", "integer"},
		{"DYN_TCP_CONNECT_TIMEOUT", "x", "positive"},
		{"DYN_TCP_CHANNEL_BUFFER", "-3", "integer"},
		{"DYN_HTTP_RPC_HOST", "a b", "host name"},
		{"DYN_HTTP_RPC_PORT", "99999", "0 to 65535"},
		{"DYN_HTTP_RPC_ROOT_PATH", "v1/rpc", "absolute"},
		{"DYN_HTTP_RPC_ROOT_PATH", "/v1?x", "absolute"},
		{"DYN_HTTP2_MAX_FRAME_SIZE", "1024", "16384 to 16777215"},
		{"DYN_HTTP2_MAX_FRAME_SIZE", "16777216", "16384 to 16777215"},
		{"DYN_HTTP2_MAX_CONCURRENT_STREAMS", "0", "integer"},
		{"DYN_HTTP2_POOL_MAX_IDLE_PER_HOST", "-1", "integer"},
		{"DYN_HTTP2_POOL_IDLE_TIMEOUT_SECS", "1.5", "whole number"},
		{"DYN_HTTP2_KEEP_ALIVE_INTERVAL_SECS", "0", "whole number"},
		{"DYN_HTTP2_KEEP_ALIVE_TIMEOUT_SECS", "10s", "whole number"},
		{"DYN_HTTP2_ADAPTIVE_WINDOW", "maybe", "true or false"},
		{"NATS_SERVER", "localhost:4222", "nats://"},
		{"NATS_SERVER", "http://localhost:4222", "nats://"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			_, err := ConfigFromLookup(lookupFrom(map[string]string{tt.name: tt.value}))
			if err == nil {
				t.Fatalf("%s=%q accepted", tt.name, tt.value)
			}
			msg := err.Error()
			for _, want := range []string{tt.name, tt.value, tt.valid} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
		})
	}
}

func TestConfigFromEnvReadsProcessEnv(t *testing.T) {
	t.Setenv("DYN_REQUEST_PLANE", "nAtS")
	t.Setenv("DYN_TCP_POOL_SIZE", "7")
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Plane != PlaneNATS || cfg.TCP.PoolSize != 7 {
		t.Fatalf("got plane %q pool %d", cfg.Plane, cfg.TCP.PoolSize)
	}
	t.Setenv("DYN_REQUEST_PLANE", "zmq")
	if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "DYN_REQUEST_PLANE") {
		t.Fatalf("got %v, want an error naming DYN_REQUEST_PLANE", err)
	}
}

func TestConfigLogValue(t *testing.T) {
	var buf strings.Builder
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "transport", DefaultConfig())
	for _, want := range []string{"transport.plane=tcp", "transport.tcp.pool_size=50", "transport.http.root_path=/v1/rpc", "transport.nats.url=nats://localhost:4222"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log line %q lacks %q", buf.String(), want)
		}
	}
}

func TestAddressJSON(t *testing.T) {
	tests := []struct {
		addr Address
		json string
	}{
		{Address{PlaneTCP, "10.0.0.1:4000"}, `{"tcp":"10.0.0.1:4000"}`},
		{Address{PlaneHTTP, "http://10.0.0.1:8888/v1/rpc"}, `{"http":"http://10.0.0.1:8888/v1/rpc"}`},
		{Address{PlaneNATS, "ns.comp.generate.1f"}, `{"nats":"ns.comp.generate.1f"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.json {
			t.Errorf("Marshal(%v) = %s, want %s", tt.addr, b, tt.json)
		}
		var got Address
		if err := json.Unmarshal([]byte(tt.json), &got); err != nil {
			t.Fatal(err)
		}
		if got != tt.addr {
			t.Errorf("Unmarshal(%s) = %v, want %v", tt.json, got, tt.addr)
		}
	}
	for _, bad := range []string{`{}`, `{"tcp":"a","http":"b"}`, `{"grpc":"x"}`, `{"TCP":"x"}`, `{"tcp":""}`, `{"tcp":1}`, `"tcp"`, `null`} {
		var a Address
		if err := json.Unmarshal([]byte(bad), &a); err == nil {
			t.Errorf("Unmarshal(%s) accepted: %v", bad, a)
		}
	}
	if _, err := json.Marshal(Address{Kind: "zmq", Addr: "x"}); err == nil {
		t.Error("Marshal accepted kind zmq")
	}
}

func TestTransportAddresses(t *testing.T) {
	tcp := Address{Kind: PlaneTCP, Addr: "10.0.0.1:9999"}
	http := Address{Kind: PlaneHTTP, Addr: "http://10.0.0.1:8888/v1/rpc"}
	nats := Address{Kind: PlaneNATS, Addr: "ns.backend.generate-1f"}
	for _, tt := range []struct {
		name   string
		addrs  []Address
		prefer Plane
		want   Address
		ok     bool
	}{
		{"none", nil, PlaneTCP, Address{}, false},
		{"one, preferred", []Address{tcp}, PlaneTCP, tcp, true},
		{"one, other plane", []Address{nats}, PlaneHTTP, nats, true},
		{"two, preferred second", []Address{tcp, http}, PlaneHTTP, http, true},
		{"two, neither preferred: tcp first", []Address{http, tcp}, PlaneNATS, tcp, true},
		{"three", []Address{nats, http, tcp}, PlaneNATS, nats, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := TransportOf(tt.addrs...)
			if got := AddressesOf(tr); len(got) != len(tt.addrs) {
				t.Errorf("AddressesOf(TransportOf(%v)) = %v", tt.addrs, got)
			}
			got, ok := Pick(tr, tt.prefer)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Pick(%v, %s) = %v, %v; want %v, %v", tr, tt.prefer, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestConfigComplete: an unset configuration comes from the environment, a
// set one is kept, and a bad variable is an error.
func TestConfigComplete(t *testing.T) {
	t.Setenv("DYN_REQUEST_PLANE", "http")
	var unset Config
	if err := unset.Complete(); err != nil || unset.Plane != PlaneHTTP {
		t.Fatalf("unset config completed to plane %q, %v; want http from DYN_REQUEST_PLANE", unset.Plane, err)
	}
	set := DefaultConfig()
	set.Plane = PlaneNATS
	if err := set.Complete(); err != nil || set.Plane != PlaneNATS {
		t.Fatalf("set config completed to plane %q, %v; want nats kept", set.Plane, err)
	}
	t.Setenv("DYN_REQUEST_PLANE", "carrier-pigeon")
	var bad Config
	if err := bad.Complete(); err == nil {
		t.Fatal("an unknown DYN_REQUEST_PLANE completed without an error")
	}
}
