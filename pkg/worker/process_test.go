package worker_test

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// TestProcessConfig parses the shared worker command flags, and checks that
// Apply hands every one of them to the worker's Config (the token as
// credentials), and that Validate refuses what each part refuses.
func TestProcessConfig(t *testing.T) {
	var c worker.ProcessConfig
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--registry-addr=r1,r2", "--eventbus-addr=e1", "--lease-ttl=3s", "--drain-timeout=4s",
		"--auth-token=secret", "--kv-events-mode=direct", "--kv-events-ring=7", "--kv-publish-interval=250ms", "--worker-api-addr=127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	c.Transport = transport.DefaultConfig()
	if err := c.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var w worker.Config
	if err := c.Apply(&w); err != nil {
		t.Fatal(err)
	}
	if w.RegistryAddr != "r1,r2" || w.EventbusAddr != "e1" || w.LeaseTTL != 3*time.Second || w.DrainTimeout != 4*time.Second ||
		w.Transport.Plane != transport.PlaneTCP || w.KVEventsMode != kvevents.Direct || w.KVEventsRing != 7 || w.KVPublishInterval != 250*time.Millisecond || w.API.GRPCAddr != "127.0.0.1:0" {
		t.Fatalf("Apply gave %+v", w)
	}
	if w.Token == nil || w.Credentials == nil || w.Credentials.Info().SecurityProtocol != "insecure" {
		t.Fatalf("token credentials %v, transport credentials %v; want a token and plaintext", w.Token, w.Credentials)
	}

	for _, tc := range []struct {
		name string
		set  func(*worker.ProcessConfig)
		want string
	}{
		{"kv events mode", func(c *worker.ProcessConfig) { c.KV.Mode = "carrier-pigeon" }, "carrier-pigeon"},
		{"kv publish interval", func(c *worker.ProcessConfig) { c.KV.PublishInterval = -time.Second }, "--kv-publish-interval"},
		{"client TLS key without its certificate", func(c *worker.ProcessConfig) { c.ClientTLS.KeyFile = "k.pem" }, "--client-tls-cert and --client-tls-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := c
			tc.set(&bad)
			if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
