// Package registryclient is the Go client of the Switchyard registry: a
// connection that fails over between registry replicas, a Session that
// registers a worker and keeps its lease alive, and Watchers that keep a live
// map of instances or model cards through any disconnect.
package registryclient

import (
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
)

// Client is a connection to one or more registry replicas. Calls go to one
// replica at a time; when it fails, the connection moves to the next.
type Client struct {
	cc  *grpc.ClientConn
	rpc registryv1.RegistryServiceClient
	log *slog.Logger
}

// Options tune Dial; they have the same names in every Switchyard client
// (see pkg/grpcclient).
type Options struct {
	// Credentials secure the connection; nil means plaintext.
	Credentials credentials.TransportCredentials
	// Log receives the client's notices; nil discards them.
	Log *slog.Logger
	// DialOptions are added to the connection's.
	DialOptions []grpc.DialOption
	// Token sends a bearer token on every call; nil sends none (see
	// grpcclient.Options).
	Token credentials.PerRPCCredentials
}

// Dial connects to registry replicas at addrs (host:port each, or
// comma-separated lists of them), through pkg/grpcclient. It does not wait
// for a connection.
func Dial(addrs []string, opts Options) (*Client, error) {
	// Registry replicas all front the same store: a call may go to any
	// that serves, and one cut from the store is left (see PreferServing).
	gopts := grpcclient.Options{Credentials: opts.Credentials, Log: opts.Log, DialOptions: opts.DialOptions, Token: opts.Token, PreferServing: true}
	cc, err := grpcclient.Dial("registry", addrs, gopts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	return &Client{cc: cc, rpc: registryv1.NewRegistryServiceClient(cc), log: gopts.Logger()}, nil
}

// Raw is the generated client, for calls this package does not wrap.
func (c *Client) Raw() registryv1.RegistryServiceClient { return c.rpc }

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }
