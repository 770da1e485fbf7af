package tlsconfig_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// TestRegisterClientFlags: the --client-tls-* flags fill the client's
// certificate, key and CA, beside a server's --tls-* flags on the same flag
// set, their help names the services the process calls, and Complete's and
// Validate's errors name the flags of each.
func TestRegisterClientFlags(t *testing.T) {
	var server, client tlsconfig.Config
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	server.RegisterFlags(fs)
	client.RegisterClientFlags(fs, "the registry and eventbus")
	if err := fs.Parse([]string{"--tls-cert=s.pem", "--tls-key=s.key", "--client-tls-cert=c.pem", "--client-tls-key=c.key", "--client-tls-ca=ca.pem"}); err != nil {
		t.Fatal(err)
	}
	if client.CertFile != "c.pem" || client.KeyFile != "c.key" || client.CAFile != "ca.pem" {
		t.Errorf("client = %+v, want c.pem, c.key, ca.pem", client)
	}
	if server.CertFile != "s.pem" || server.KeyFile != "s.key" || server.CAFile != "" {
		t.Errorf("server = %+v, want s.pem, s.key and no CA", server)
	}
	// Their errors name the flags that were given.
	for _, tc := range []struct {
		c    tlsconfig.Config
		want string
	}{
		{server, "--tls-cert: "},
		{client, "--client-tls-cert: "},
	} {
		if err := tc.c.Complete(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Complete with files that are not there = %v, want %q first", err, tc.want)
		}
	}
	halfServer, halfClient := server, client
	halfServer.KeyFile, halfClient.KeyFile = "", ""
	if err := halfServer.Validate(); err == nil || err.Error() != "--tls-cert and --tls-key must be given together" {
		t.Errorf("server Validate = %v", err)
	}
	if err := halfClient.Validate(); err == nil || err.Error() != "--client-tls-cert and --client-tls-key must be given together" {
		t.Errorf("client Validate = %v", err)
	}
	for _, name := range []string{"client-tls-cert", "client-tls-ca"} {
		if u := fs.Lookup(name).Usage; !strings.Contains(u, "the registry and eventbus") {
			t.Errorf("--%s usage %q does not name the services called", name, u)
		}
	}
}
