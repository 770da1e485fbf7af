package tlsconfig_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// TestRegisterClientFlags: the --client-tls-* flags fill the client's
// certificate, key and CA, beside a server's --tls-* flags on the same flag
// set, and their help names the services the process calls.
func TestRegisterClientFlags(t *testing.T) {
	var server, client tlsconfig.Config
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	server.RegisterFlags(fs)
	client.RegisterClientFlags(fs, "the registry and eventbus")
	if err := fs.Parse([]string{"--tls-cert=s.pem", "--tls-key=s.key", "--client-tls-cert=c.pem", "--client-tls-key=c.key", "--client-tls-ca=ca.pem"}); err != nil {
		t.Fatal(err)
	}
	if want := (tlsconfig.Config{CertFile: "c.pem", KeyFile: "c.key", CAFile: "ca.pem"}); client != want {
		t.Errorf("client = %+v, want %+v", client, want)
	}
	if want := (tlsconfig.Config{CertFile: "s.pem", KeyFile: "s.key"}); server != want {
		t.Errorf("server = %+v, want %+v", server, want)
	}
	for _, name := range []string{"client-tls-cert", "client-tls-ca"} {
		if u := fs.Lookup(name).Usage; !strings.Contains(u, "the registry and eventbus") {
			t.Errorf("--%s usage %q does not name the services called", name, u)
		}
	}
}
