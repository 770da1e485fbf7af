// Package routerclient is the Go client of Switchyard's router
// (switchyard.router.v1.RouterService), dialled through pkg/grpcclient like
// the registry and eventbus clients: a list of replicas ("a,b" works) on one
// connection that fails over between them, TLS, and the same option names.
//
// Errors are gRPC statuses; what a caller branches on is the code plus the
// google.rpc.ErrorInfo reason documented on each RPC in router.proto (read
// it with pkg/apierr), never the message text.
package routerclient

import (
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
)

// Options tune Dial; they have the same names in every Switchyard client.
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

// Client is a connection to one or more router replicas. It is a
// routerv1.RouterServiceClient: calls go to the connected replica and move to
// the next when it goes away. Without replica sync, router replicas do not
// share their record of routed requests, so a caller reports prefill
// completion and frees to the same Client it routed through.
type Client struct {
	routerv1.RouterServiceClient
	cc *grpc.ClientConn
}

// Dial connects to router replicas at addrs (host:port each, or
// comma-separated lists of them). It does not wait for a connection.
func Dial(addrs []string, opts Options) (*Client, error) {
	cc, err := grpcclient.Dial("router", addrs, grpcclient.Options{Credentials: opts.Credentials, Log: opts.Log, DialOptions: opts.DialOptions, Token: opts.Token})
	if err != nil {
		return nil, err
	}
	return &Client{RouterServiceClient: routerv1.NewRouterServiceClient(cc), cc: cc}, nil
}

// Raw is the generated client, for symmetry with the other clients.
func (c *Client) Raw() routerv1.RouterServiceClient { return c.RouterServiceClient }

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }
