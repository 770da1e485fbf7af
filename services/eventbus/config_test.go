package eventbus_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-llm/switchyard/pkg/flagenv"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestExistingStreamKeepsOperatorSettings checks that the eventbus brings an
// existing stream to its own subjects, max age and dedup window and leaves
// everything else an operator set alone.
func TestExistingStreamKeepsOperatorSettings(t *testing.T) {
	ctx := testCtx(t)
	ns := eventbustest.StartNATS(t)
	js := directJetStream(t, ns.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: eventbus.StreamName("ops"), Subjects: []string{"ops.comp.>"}, Description: "kept by ops",
		MaxMsgs: 1000, MaxAge: 5 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	cfg := eventbustest.Config(ns.ClientURL())
	cfg.DedupWindow = 30 * time.Second
	svc := eventbustest.StartEventbus(t, cfg)
	c := eventbustest.Client(t, svc.Addr().String())
	if _, err := c.Publish(ctx, "ops.other.ev", wrapperspb.String("outside the old subjects")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, eventbus.StreamName("ops"))
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	got := fmt.Sprintf("subjects %v, max age %s, duplicates %s, description %q, max msgs %d",
		sc.Subjects, sc.MaxAge, sc.Duplicates, sc.Description, sc.MaxMsgs)
	if want := `subjects [ops.>], max age 1h0m0s, duplicates 30s, description "kept by ops", max msgs 1000`; got != want {
		t.Errorf("stream config: %s; want %s", got, want)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d events; want 1", n)
	}
}

func TestEmbeddedNATS(t *testing.T) {
	var cfg eventbus.Config
	cfg.Server = eventbustest.Config("").Server
	cfg.Server.MetricsAddr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.EmbeddedNATSPort = -1
	cfg.StreamMaxAge = time.Hour
	svc := eventbustest.StartEventbus(t, cfg)
	if !strings.HasPrefix(svc.NATSURL(), "nats://127.0.0.1:") {
		t.Errorf("embedded NATS URL %q", svc.NATSURL())
	}
	c := eventbustest.Client(t, svc.Addr().String())
	ctx := testCtx(t)
	resp, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.String("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetSequence() != 1 {
		t.Errorf("first sequence %d; want 1", resp.GetSequence())
	}
	// The eventbus's own metrics are on /metrics.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	mresp, err := hc.Get("http://" + svc.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	body, err := io.ReadAll(mresp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := `switchyard_eventbus_published_events_total{duplicate="false",namespace="ns"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() eventbus.Config {
		c := eventbustest.Config("nats://localhost:4222")
		return c
	}
	tests := []struct {
		name   string
		modify func(*eventbus.Config)
		want   string
	}{
		{"valid external", func(*eventbus.Config) {}, ""},
		{"valid embedded", func(c *eventbus.Config) { c.NATSServer = ""; c.DataDir = "d" }, ""},
		{"embedded without data dir", func(c *eventbus.Config) { c.NATSServer = "" }, "--data-dir"},
		{"bad scheme", func(c *eventbus.Config) { c.NATSServer = "http://x:1" }, "valid schemes"},
		{"host and port", func(c *eventbus.Config) { c.NATSServer = "nats-0:4222,nats-1:4222" }, ""},
		{"several urls", func(c *eventbus.Config) { c.NATSServer = "nats://a:4222, tls://b:4222" }, ""},
		{"not a url", func(c *eventbus.Config) { c.NATSServer = "nats://" }, "NATS_SERVER"},
		{"token and user", func(c *eventbus.Config) { c.NATSToken = "t"; c.NATSUser = "u"; c.NATSPassword = "p" }, "NATS_TOKEN"},
		{"user without password", func(c *eventbus.Config) { c.NATSUser = "u" }, "NATS_PASSWORD"},
		{"credentials for embedded", func(c *eventbus.Config) { c.NATSServer = ""; c.DataDir = "d"; c.NATSToken = "t" }, "external server only"},
		{"zero max age", func(c *eventbus.Config) { c.StreamMaxAge = 0 }, "--stream-max-age"},
		{"no linger", func(c *eventbus.Config) { c.DeliverLinger = -1 }, ""},
		{"linger too long", func(c *eventbus.Config) { c.DeliverLinger = 2 * time.Second }, "--deliver-linger"},
		{"dedup window", func(c *eventbus.Config) { c.DedupWindow = 10 * time.Second }, ""},
		{"negative dedup window", func(c *eventbus.Config) { c.DedupWindow = -time.Second }, "--dedup-window"},
		{"dedup window past max age", func(c *eventbus.Config) { c.StreamMaxAge = time.Minute }, "--dedup-window"},
		{"coalesce nothing", func(c *eventbus.Config) { c.CoalesceEvents = []string{} }, ""},
		{"coalesce an event name", func(c *eventbus.Config) { c.CoalesceEvents = []string{"kv_cache_update", "mine"} }, ""},
		{"coalesce a subject", func(c *eventbus.Config) { c.CoalesceEvents = []string{"ns.c.kv_cache_update"} }, "--coalesce-events"},
		{"coalesce a wildcard", func(c *eventbus.Config) { c.CoalesceEvents = []string{"*"} }, "--coalesce-events"},
		{"coalesce an empty name", func(c *eventbus.Config) { c.CoalesceEvents = []string{""} }, "--coalesce-events"},
		{"coalesce gap", func(c *eventbus.Config) { c.CoalesceGap = 20 * time.Millisecond }, ""},
		{"negative coalesce gap", func(c *eventbus.Config) { c.CoalesceGap = -time.Millisecond }, "--coalesce-gap"},
		{"coalesce gap too long", func(c *eventbus.Config) { c.CoalesceGap = 2 * time.Second }, "--coalesce-gap"},
		{"publish rate target", func(c *eventbus.Config) { c.PublishRateTarget = 500 }, ""},
		{"publishers never paced", func(c *eventbus.Config) { c.PublishRateTarget = -1 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.modify(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v; want error containing %q", err, tc.want)
			}
		})
	}
}

func TestNATSCredentials(t *testing.T) {
	start := func(t *testing.T, opts *natsserver.Options) string {
		t.Helper()
		opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoSigs = "127.0.0.1", -1, true, t.TempDir(), true
		ns, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(func() { eventbustest.StopNATS(ns) })
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return ns.ClientURL()
	}
	tests := []struct {
		name    string
		server  natsserver.Options
		user    string
		pass    string
		token   string
		wantErr bool
	}{
		{"user and password", natsserver.Options{Username: "eb", Password: "secret"}, "eb", "secret", "", false},
		{"wrong password", natsserver.Options{Username: "eb", Password: "secret"}, "eb", "guess", "", true},
		{"token", natsserver.Options{Authorization: "tok"}, "", "", "tok", false},
		{"missing token", natsserver.Options{Authorization: "tok"}, "", "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := eventbustest.Config(start(t, &tc.server))
			cfg.NATSUser, cfg.NATSPassword, cfg.NATSToken = tc.user, tc.pass, tc.token
			svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
			if tc.wantErr {
				if err == nil {
					svc.Stop()
					t.Fatal("started with wrong credentials")
				}
				if !strings.Contains(err.Error(), "connect to NATS") {
					t.Errorf("error %q does not say what failed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Stop()
			c := eventbustest.Client(t, svc.Addr().String())
			if _, err := c.Publish(testCtx(t), "ns.comp.ev", wrapperspb.String("authenticated")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("NATS_SERVER", "nats://nats.example:4222")
	t.Setenv("NATS_TOKEN", "from-env")
	var cfg eventbus.Config
	fs := flag.NewFlagSet("eventbus", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--data-dir", "/var/lib/eventbus", "--nats-token", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := flagenv.Set(fs, eventbus.EnvPrefix, eventbus.EnvVars); err != nil {
		t.Fatal(err)
	}
	want := struct {
		GRPCAddr, MetricsAddr, NATSServer, NATSToken, DataDir string
		StreamMaxAge, DedupWindow, DeliverLinger              time.Duration
	}{":7002", ":9102", "nats://nats.example:4222", "from-flag", "/var/lib/eventbus", time.Hour, eventbus.DefaultDedupWindow, eventbus.DefaultDeliverLinger}
	got := want
	got.GRPCAddr, got.MetricsAddr, got.NATSServer, got.NATSToken, got.DataDir = cfg.Server.GRPCAddr, cfg.Server.MetricsAddr, cfg.NATSServer, cfg.NATSToken, cfg.DataDir
	got.StreamMaxAge, got.DedupWindow, got.DeliverLinger = cfg.StreamMaxAge, cfg.DedupWindow, cfg.DeliverLinger
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestEmbeddedNATSPortInUse(t *testing.T) {
	ns := eventbustest.StartNATS(t)
	var cfg eventbus.Config
	cfg.Server = eventbustest.Config("").Server
	cfg.DataDir = t.TempDir()
	cfg.EmbeddedNATSPort = portOf(t, ns.ClientURL())
	cfg.StreamMaxAge = time.Hour
	svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
	if err == nil {
		svc.Stop()
		t.Fatal("started an embedded nats-server on a port in use")
	}
	if !strings.Contains(err.Error(), "listen") {
		t.Errorf("error %q does not say the port is in use", err)
	}
}

// TestCoalesceEventsFlag: unset leaves the default (nil), empty coalesces
// nothing, a list names the event names.
func TestCoalesceEventsFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unset", nil, nil},
		{"empty", []string{"--coalesce-events", ""}, []string{}},
		{"list", []string{"--coalesce-events", "kv_cache_update, mine"}, []string{"kv_cache_update", "mine"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg eventbus.Config
			fs := flag.NewFlagSet("eventbus", flag.ContinueOnError)
			cfg.RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg.CoalesceEvents); diff != "" || (tc.want == nil) != (cfg.CoalesceEvents == nil) {
				t.Errorf("CoalesceEvents %#v, want %#v", cfg.CoalesceEvents, tc.want)
			}
		})
	}
}
