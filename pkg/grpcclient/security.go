package grpcclient

import (
	"flag"
	"fmt"

	"google.golang.org/grpc/credentials"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
)

// Security is how a process secures its calls to the services it calls:
// client TLS (--client-tls-cert, --client-tls-key, --client-tls-ca) and
// the bearer token it sends (--auth-token, --client-auth-token-file, with
// the environment of authtoken.EnvVars). The router, the frontend and
// every worker command embed it, so that these flags, their environment
// and their errors are the same everywhere (they are contracts), and so
// that its fields read as the command's own.
type Security struct {
	// ClientTLS secures calls to the services this one calls.
	ClientTLS tlsconfig.Config
	// ClientAuth is the bearer token sent to the services this one calls.
	ClientAuth authtoken.Client
}

// RegisterFlags adds the --client-tls-* flags, whose help names peers (as
// "the registry and eventbus"), and the client token flags.
func (c *Security) RegisterFlags(fs *flag.FlagSet, peers string) {
	c.ClientTLS.RegisterClientFlags(fs, peers)
	c.ClientAuth.RegisterFlags(fs)
}

// Complete reads the token file, once, and checks that the TLS files are
// there, so that a missing file is an error at start, not at the first
// call.
func (c Security) Complete() error {
	if err := c.ClientAuth.Complete(); err != nil {
		return err
	}
	if err := c.ClientTLS.Complete(); err != nil {
		return fmt.Errorf("client TLS: %w", err)
	}
	return nil
}

// Validate checks the token and TLS settings; it reads nothing.
func (c Security) Validate() error {
	if err := c.ClientAuth.Validate(); err != nil {
		return err
	}
	return c.ClientTLS.Validate()
}

// Credentials loads the TLS files and the token: the transport credentials
// (insecure without TLS) and the per-RPC credentials that send the token
// (nil without one), for Options.Credentials and Options.Token.
func (c Security) Credentials() (credentials.TransportCredentials, credentials.PerRPCCredentials, error) {
	creds, err := c.ClientTLS.ClientCredentials()
	if err != nil {
		return nil, nil, err
	}
	auth, err := c.ClientAuth.Credentials()
	if err != nil {
		return nil, nil, err
	}
	return creds, auth, nil
}
