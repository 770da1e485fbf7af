package eventbus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig/tlsconfigtest"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestNATSTLS runs the eventbus against a nats-server that requires TLS and
// verifies client certificates: it connects with --nats-ca and a client
// certificate, and is refused without the certificate or without TLS.
func TestNATSTLS(t *testing.T) {
	t.Parallel()
	files, err := tlsconfigtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := files.Server().ServerTLS() // mutual: client certificates required and verified
	if err != nil {
		t.Fatal(err)
	}
	opts := &natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true,
		TLS: true, TLSVerify: true, TLSConfig: serverTLS, TLSTimeout: 2}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { eventbustest.StopNATS(ns) })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := strings.Replace(ns.ClientURL(), "nats://", "tls://", 1)

	tests := []struct {
		name    string
		tls     tlsconfig.Config
		wantErr bool
	}{
		{name: "CA and client certificate", tls: files.Client()},
		{name: "no client certificate", tls: tlsconfig.Config{CAFile: files.CA}, wantErr: true},
		{name: "no TLS settings", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := eventbustest.Config(url)
			cfg.NATSTLS = tc.tls
			cfg.NATSMaxReconnects = 0 // fail at once instead of retrying a refused handshake
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			svc, err := eventbus.Start(context.Background(), cfg, eventbustest.Logger())
			if tc.wantErr {
				if err == nil {
					svc.Stop()
					t.Fatal("connected to a nats-server that verifies clients without a client certificate")
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
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.String("over TLS")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
