// Package discovery is the Go client of the Switchyard registry: a
// connection that fails over between registry replicas, a Session that
// registers a worker and keeps its lease alive, and Watchers that keep a live
// map of instances or model cards through any disconnect.
package discovery

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// Client is a connection to one or more registry replicas. Calls go to one
// replica at a time; when it fails, the connection moves to the next.
type Client struct {
	cc  *grpc.ClientConn
	rpc registryv1.RegistryServiceClient
}

// Options tune Dial.
type Options struct {
	// Creds secure the connection; nil means plaintext.
	Creds credentials.TransportCredentials
	// DialOptions are added to the connection's.
	DialOptions []grpc.DialOption
}

var schemeSeq atomic.Uint64

// Dial connects to registry replicas at addrs (host:port each, or one
// comma-separated string). It does not wait for a connection.
func Dial(addrs []string, opts Options) (*Client, error) {
	var list []resolver.Address
	for _, a := range addrs {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				list = append(list, resolver.Address{Addr: p})
			}
		}
	}
	if len(list) == 0 {
		return nil, errors.New("discovery: no registry address")
	}
	creds := opts.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	// A manual resolver with every replica and pick_first: gRPC tries them in
	// order and moves on when the connected one goes away.
	r := manual.NewBuilderWithScheme(fmt.Sprintf("switchyard-registry-%d", schemeSeq.Add(1)))
	r.InitialState(resolver.State{Addresses: list})
	dopts := append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 3 * time.Second, PermitWithoutStream: true}),
		// Redial a restarted replica within a second or two: a session's
		// lease deadline is only seconds away.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}, opts.DialOptions...)
	cc, err := grpc.NewClient(r.Scheme()+":///registry", dopts...)
	if err != nil {
		return nil, fmt.Errorf("discovery: dial registry: %w", err)
	}
	return &Client{cc: cc, rpc: registryv1.NewRegistryServiceClient(cc)}, nil
}

// RPC is the raw generated client, for calls this package does not wrap.
func (c *Client) RPC() registryv1.RegistryServiceClient { return c.rpc }

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }
