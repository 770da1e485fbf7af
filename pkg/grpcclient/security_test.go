package grpcclient_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig/tlsconfigtest"
)

// TestSecurity: the flags Security registers fill it; Complete and
// Validate name the flag at fault, with the words the router, frontend and
// worker commands have always used (their config tests check the same);
// Credentials gives TLS and the token, or plaintext and none.
func TestSecurity(t *testing.T) {
	dir := t.TempDir()
	files, err := tlsconfigtest.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("# comment\n s3cret \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name    string
		args    []string
		wantErr string // of Complete, then Validate; "" for none
		tls     bool
		token   string
	}{
		{name: "nothing", args: nil},
		{name: "token", args: []string{"--auth-token", "t1"}, token: "t1"},
		{name: "token file", args: []string{"--client-auth-token-file", tokenFile}, token: "s3cret"},
		{name: "mutual TLS", args: []string{"--client-tls-cert", files.ClientCert, "--client-tls-key", files.ClientKey, "--client-tls-ca", files.CA}, tls: true},
		{name: "CA only", args: []string{"--client-tls-ca", files.CA}, tls: true},
		{name: "token file missing", args: []string{"--client-auth-token-file", missing}, wantErr: "--client-auth-token-file"},
		{name: "CA missing", args: []string{"--client-tls-ca", missing}, wantErr: "client TLS: --client-tls-ca"},
		{name: "key without certificate", args: []string{"--client-tls-key", files.ClientKey}, wantErr: "--client-tls-cert and --client-tls-key must be given together"},
		{name: "token and token file", args: []string{"--auth-token", "t", "--client-auth-token-file", tokenFile}, wantErr: "--auth-token and --client-auth-token-file are exclusive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s grpcclient.Security
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			s.RegisterFlags(fs, "the registry and eventbus")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := s.Complete()
			if err == nil {
				err = s.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Complete, Validate = %v; want an error naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Complete, Validate = %v", err)
			}
			creds, auth, err := s.Credentials()
			if err != nil {
				t.Fatal(err)
			}
			if got := creds.Info().SecurityProtocol; (got == "tls") != tc.tls {
				t.Errorf("transport credentials %q; want TLS %v", got, tc.tls)
			}
			if tc.token == "" {
				if auth != nil {
					t.Errorf("per-RPC credentials %v without a token", auth)
				}
				return
			}
			md, err := auth.GetRequestMetadata(context.Background())
			if err != nil || md["authorization"] != "Bearer "+tc.token {
				t.Errorf("token metadata = %v, %v; want Bearer %s", md, err, tc.token)
			}
		})
	}
	var s grpcclient.Security
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	s.RegisterFlags(fs, "the registry and eventbus")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if got, want := strings.Join(names, " "), "auth-token client-auth-token-file client-tls-ca client-tls-cert client-tls-key"; got != want {
		t.Errorf("flags %q; want %q", got, want)
	}
	if u := fs.Lookup("client-tls-ca").Usage; !strings.Contains(u, "the registry and eventbus") {
		t.Errorf("--client-tls-ca usage %q does not name the peers", u)
	}
}
