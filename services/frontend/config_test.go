package frontend

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// flagDefaults is the configuration the binary starts from with no flags,
// with the request plane given, so that the environment does not matter.
func flagDefaults(t testing.TB) Config {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	c.Transport = transport.DefaultConfig()
	return c
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // empty: valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"in-process mode needs no router", func(c *Config) { c.RouterMode = "round-robin"; c.RouterAddr = "" }, ""},
		{"approximate kv needs no router", func(c *Config) { c.NoKVEvents = true; c.RouterAddr = "" }, ""},
		{"direct is the router's mode", func(c *Config) { c.RouterMode = "direct" }, "direct"},
		{"unknown mode", func(c *Config) { c.RouterMode = "fastest" }, "fastest"},
		{"port out of range", func(c *Config) { c.HTTPPort = 70000 }, "--http-port"},
		{"http addr overrides the port", func(c *Config) { c.HTTPPort = -1; c.HTTPAddr = "127.0.0.1:0" }, ""},
		{"http addr without a port", func(c *Config) { c.HTTPAddr = "localhost" }, "--http-addr"},
		{"negative migration limit", func(c *Config) { c.MigrationLimit = -1 }, "--migration-limit"},
		{"negative in-flight bound", func(c *Config) { c.MaxInflightPerWorker = -1 }, "--max-inflight-per-worker"},
		{"negative shutdown timeout", func(c *Config) { c.ShutdownTimeout = -1 }, "--shutdown-timeout"},
		{"zero handoff deadline", func(c *Config) { c.HandoffDeadline = 0 }, "--handoff-deadline"},
		{"no registry", func(c *Config) { c.RegistryAddr = " " }, "--registry-addr"},
		{"registry list without an address", func(c *Config) { c.RegistryAddr = " , ," }, "--registry-addr"},
		{"no eventbus", func(c *Config) { c.EventbusAddr = "" }, "--eventbus-addr"},
		{"kv mode without a router", func(c *Config) { c.RouterAddr = "," }, "--router-addr"},
		{"core tuning", func(c *Config) { c.Core.Temperature = -1 }, "--router-temperature"},
		{"request plane", func(c *Config) { c.Transport.Plane = "pigeon" }, "pigeon"},
		{"token and token file", func(c *Config) { c.ClientAuth = authtoken.Client{Token: "t", TokenFile: "f"} }, "exclusive"},
		{"client cert without key", func(c *Config) { c.ClientTLS.CertFile = "c.pem" }, "--client-tls-cert and --client-tls-key"},
		// Validate reads nothing: files that are not there are Complete's.
		{"files are not read", func(c *Config) {
			c.APIKeyFile, c.ClientAuth.TokenFile = "/nonexistent/keys", "/nonexistent/token"
			c.ClientTLS.CertFile, c.ClientTLS.KeyFile, c.ClientTLS.CAFile = "/nonexistent/c", "/nonexistent/k", "/nonexistent/ca"
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := flagDefaults(t)
			tt.mod(&c)
			before := c
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want it to mention %q", err, tt.want)
			}
			if !reflect.DeepEqual(before, c) {
				t.Fatal("Validate changed the configuration")
			}
		})
	}
}

func TestConfigComplete(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keyFile, []byte("# keys\nk1\n"+authtoken.Hash("k2")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# none yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("reads keys, origins and the plane", func(t *testing.T) {
		t.Setenv("DYN_REQUEST_PLANE", "http")
		c := flagDefaults(t)
		c.Transport = transport.Config{}
		c.APIKey, c.APIKeyFile, c.CORSOrigins = "k0", keyFile, "https://a.example/, https://b.example"
		if err := c.Complete(); err != nil {
			t.Fatal(err)
		}
		if c.keys.len() != 3 || c.Transport.Plane != transport.PlaneHTTP || !c.corsOrigins["https://a.example"] || !c.corsOrigins["https://b.example"] {
			t.Fatalf("keys %d, plane %q, origins %v", c.keys.len(), c.Transport.Plane, c.corsOrigins)
		}
		again := c
		// (keys is a fresh keyring each time, with its clock: compare what it holds.)
		if err := again.Complete(); err != nil || again.keys.len() != c.keys.len() || !reflect.DeepEqual(again.Transport, c.Transport) || !reflect.DeepEqual(again.corsOrigins, c.corsOrigins) {
			t.Fatalf("a second Complete changed the configuration (%v)", err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate after Complete: %v", err)
		}
	})
	t.Run("a set plane is kept", func(t *testing.T) {
		t.Setenv("DYN_REQUEST_PLANE", "nats")
		c := flagDefaults(t)
		if err := c.Complete(); err != nil || c.Transport.Plane != transport.PlaneTCP {
			t.Fatalf("Complete = %v, plane %q, want the configured tcp", err, c.Transport.Plane)
		}
	})
	for name, tt := range map[string]struct {
		mod  func(*Config)
		env  string
		want string
	}{
		"missing key file":      {mod: func(c *Config) { c.APIKeyFile = filepath.Join(dir, "nope") }, want: "--api-key-file"},
		"key file without keys": {mod: func(c *Config) { c.APIKeyFile = empty }, want: "holds no key"},
		"bad digest":            {mod: func(c *Config) { c.APIKeyFile = writeFile(t, dir, "sha256:zz\n") }, want: "SHA-256"},
		"missing token file":    {mod: func(c *Config) { c.ClientAuth.TokenFile = filepath.Join(dir, "nope") }, want: "--client-auth-token-file"},
		"missing CA":            {mod: func(c *Config) { c.ClientTLS.CAFile = filepath.Join(dir, "nope") }, want: "--client-tls-ca"},
		"bad plane variable":    {mod: func(c *Config) { c.Transport = transport.Config{} }, env: "pigeon", want: "DYN_REQUEST_PLANE"},
	} {
		t.Run(name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("DYN_REQUEST_PLANE", tt.env)
			}
			c := flagDefaults(t)
			tt.mod(&c)
			if err := c.Complete(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Complete = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, dir, content string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// FuzzConfigValidate: Validate parses the mode, the addresses and the
// HTTP address; on any input it neither panics nor changes the
// configuration, answers the same twice, and accepts an HTTP address only
// when it is host:port.
func FuzzConfigValidate(f *testing.F) {
	f.Add("kv", "", 8000, "localhost:7001", "localhost:7003", false)
	f.Add("round-robin", "127.0.0.1:0", -1, ",", "", true)
	f.Add("KV", "[::1]:80", 0, " a , b ", ",", false)
	f.Add("least-loaded", "localhost", 65536, "", "x", true)
	base := flagDefaults(f)
	f.Fuzz(func(t *testing.T, mode, httpAddr string, port int, registry, router string, noKV bool) {
		c := base
		c.RouterMode, c.HTTPAddr, c.HTTPPort, c.RegistryAddr, c.RouterAddr, c.NoKVEvents = mode, httpAddr, port, registry, router, noKV
		before := c
		err := c.Validate()
		if !reflect.DeepEqual(before, c) {
			t.Fatal("Validate changed the configuration")
		}
		if again := c.Validate(); (again == nil) != (err == nil) {
			t.Fatalf("Validate answered %v, then %v", err, again)
		}
		if err != nil {
			return
		}
		if httpAddr != "" {
			if _, _, err := net.SplitHostPort(httpAddr); err != nil {
				t.Fatalf("accepted --http-addr %q: %v", httpAddr, err)
			}
		}
		if len(splitAddrs(registry)) == 0 {
			t.Fatalf("accepted --registry-addr %q without an address", registry)
		}
		if c.usesRouterService() && len(splitAddrs(router)) == 0 {
			t.Fatalf("accepted kv mode with --router-addr %q", router)
		}
	})
}

// TestFailedStartReleasesPorts: a Start that fails after it has bound the
// debug port (the HTTP port is taken) gives it back.
func TestFailedStartReleasesPorts(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// Held for the test (Start can bind it, no other process can).
	debugAddr := testport.Shareable(t)
	c := flagDefaults(t)
	c.HTTPAddr, c.DebugAddr = taken.Addr().String(), debugAddr
	c.RegistryAddr, c.EventbusAddr, c.RouterAddr = "127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := Start(ctx, c, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Fatalf("Start = %v, want the taken --http-addr", err)
	}
	l, err := net.Listen("tcp", debugAddr)
	if err != nil {
		t.Fatalf("--debug-addr %s still bound after the failed Start: %v", debugAddr, err)
	}
	l.Close()
}
