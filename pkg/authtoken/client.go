package authtoken

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// EnvToken is the environment variable a client's token comes from when
// --auth-token is not given.
const EnvToken = "SWITCHYARD_AUTH_TOKEN"

// EnvTokenFile names a file holding the client's token.
const EnvTokenFile = "SWITCHYARD_AUTH_TOKEN_FILE"

// MetadataKey is the gRPC metadata key of the bearer token.
const MetadataKey = "authorization"

// Client is the token a process sends to the services it calls.
type Client struct {
	// Token is the bearer token in clear.
	Token string
	// TokenFile holds the token (its first non-blank line), for secrets
	// mounted as files; it is read once at start.
	TokenFile string
}

// RegisterFlags adds --auth-token and --client-auth-token-file. The
// environment fills them through the service's flagenv table (see EnvVars).
func (c *Client) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Token, "auth-token", "", "bearer token this process sends to the registry, eventbus and router (env "+EnvToken+")")
	fs.StringVar(&c.TokenFile, "client-auth-token-file", "", "file holding the bearer token to send, instead of --auth-token (env "+EnvTokenFile+")")
}

// EnvVars maps the client flags to their documented environment variables,
// for a service's flagenv table.
var EnvVars = map[string]string{
	"auth-token":             EnvToken,
	"client-auth-token-file": EnvTokenFile,
}

// Complete reads --client-auth-token-file once, so that a missing or empty
// file is a configuration error at start rather than at the first call.
func (c Client) Complete() error {
	if c.TokenFile != "" && c.Token == "" {
		if _, err := c.Resolve(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks that at most one source is given; it reads nothing.
func (c Client) Validate() error {
	if c.Token != "" && c.TokenFile != "" {
		return errors.New("--auth-token and --client-auth-token-file are exclusive")
	}
	return nil
}

// Resolve returns the token to send; empty means none.
func (c Client) Resolve() (string, error) {
	if c.TokenFile == "" {
		return strings.TrimSpace(c.Token), nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("--client-auth-token-file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("--client-auth-token-file %s holds no token", c.TokenFile)
}

// Credentials returns the per-RPC credentials that send the token, or nil
// when there is no token.
func (c Client) Credentials() (credentials.PerRPCCredentials, error) {
	tok, err := c.Resolve()
	if err != nil || tok == "" {
		return nil, err
	}
	return Bearer(tok), nil
}

// Bearer returns per-RPC credentials that send token as
// "authorization: Bearer <token>". They do not demand a secure transport:
// tokens over plaintext loopback are the laptop's case, and the servers warn
// when they listen in plaintext beyond loopback.
func Bearer(token string) credentials.PerRPCCredentials {
	return bearer{md: map[string]string{MetadataKey: "Bearer " + token}}
}

type bearer struct{ md map[string]string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// FromHeader extracts the token from an "authorization" value
// ("Bearer <token>", the scheme case-insensitive); ok is false otherwise.
func FromHeader(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// DialOptions returns the dial option that sends the token on every call,
// or none without a token, for a connection not made by pkg/grpcclient.
func (c Client) DialOptions() ([]grpc.DialOption, error) {
	creds, err := c.Credentials()
	if err != nil || creds == nil {
		return nil, err
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(creds)}, nil
}
