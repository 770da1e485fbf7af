package router_test

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/router"
)

// flagDefaults is the configuration the binary starts from with no flags.
func flagDefaults(t testing.TB) router.Config {
	t.Helper()
	var c router.Config
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*router.Config)
		want string // empty: valid
	}{
		{"defaults", func(*router.Config) {}, ""},
		{"every mode", func(c *router.Config) { c.Mode = "least-loaded" }, ""},
		{"unknown mode", func(c *router.Config) { c.Mode = "fastest" }, "fastest"},
		{"approximate", func(c *router.Config) { c.NoKVEvents = true; c.EventbusAddr = "" }, ""},
		{"no registry", func(c *router.Config) { c.RegistryAddr = " " }, "--registry-addr"},
		{"negative snapshot interval", func(c *router.Config) { c.SnapshotInterval = -time.Second }, "--snapshot-interval"},
		{"replica sync over the eventbus", func(c *router.Config) { c.ReplicaSync = true }, ""},
		{"replica sync without an eventbus", func(c *router.Config) { c.ReplicaSync = true; c.EventbusAddr = "" }, "--router-replica-sync needs --eventbus-addr"},
		{"core tuning", func(c *router.Config) { c.Core.PruneTargetRatio = 2 }, "--router-prune-target-ratio"},
		{"no grpc addr", func(c *router.Config) { c.Server.GRPCAddr = "" }, "--grpc-addr"},
		{"token and token file", func(c *router.Config) { c.ClientAuth.Token, c.ClientAuth.TokenFile = "t", "f" }, "exclusive"},
		{"client key without cert", func(c *router.Config) { c.ClientTLS.KeyFile = "k.pem" }, "--client-tls-cert and --client-tls-key"},
		// Validate reads nothing: files that are not there are Complete's.
		{"files are not read", func(c *router.Config) {
			c.Server.AuthTokenFile, c.ClientAuth.TokenFile, c.ClientTLS.CAFile = "/nonexistent/tokens", "/nonexistent/token", "/nonexistent/ca"
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
	for name, mod := range map[string]func(*router.Config){
		"server token file": func(c *router.Config) { c.Server.AuthTokenFile = "/nonexistent/tokens" },
		"client token file": func(c *router.Config) { c.ClientAuth.TokenFile = "/nonexistent/token" },
		"client CA":         func(c *router.Config) { c.ClientTLS.CAFile = "/nonexistent/ca" },
	} {
		t.Run(name, func(t *testing.T) {
			c := flagDefaults(t)
			mod(&c)
			if err := c.Complete(); err == nil || !strings.Contains(err.Error(), "/nonexistent/") {
				t.Fatalf("Complete = %v, want it to name the missing file", err)
			}
			if _, err := router.Start(t.Context(), c, slog.New(slog.DiscardHandler)); err == nil {
				t.Fatal("Start accepted a configuration Complete refuses")
			}
		})
	}
}

// freeAddr is a loopback address nobody listens on, held for the test so
// that Start can bind it but no other process takes it first (see
// testport.Shareable).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testport.Shareable(t)
}

// TestFailedStartReleasesPorts: a Start that fails after it has bound the
// gRPC and metrics ports (the debug port is taken) gives both back.
func TestFailedStartReleasesPorts(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	c := flagDefaults(t)
	c.Server.GRPCAddr, c.Server.MetricsAddr, c.Server.DebugAddr = freeAddr(t), freeAddr(t), taken.Addr().String()
	c.RegistryAddr, c.EventbusAddr = "127.0.0.1:1", ""
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := router.Start(ctx, c, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--debug-addr") {
		t.Fatalf("Start = %v, want the taken --debug-addr", err)
	}
	for _, a := range []string{c.Server.GRPCAddr, c.Server.MetricsAddr} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s still bound after the failed Start: %v", a, err)
		}
		l.Close()
	}
}
