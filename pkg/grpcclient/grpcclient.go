// Package grpcclient is the one place Switchyard dials its own services: the
// client half of pkg/grpcserver. Every client (pkg/registryclient for the
// registry, pkg/eventbusclient, pkg/routerclient) takes a list of replica
// addresses, each element itself possibly a comma-separated list, and dials
// them as one connection: a manual resolver holds every address and
// pick_first tries them in order, moving to the next when the connected one
// goes away (or, with Options.PreferServing, calls are spread over the
// replicas whose health says they serve). The options have the same names in
// every client.
package grpcclient

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client-side health checking, for PreferServing
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Options are what every Switchyard client takes, under the same names.
type Options struct {
	// Credentials secure the connection; nil means plaintext (see
	// tlsconfig.Config.ClientCredentials).
	Credentials credentials.TransportCredentials
	// Log receives the client's notices (reconnections, retries); nil
	// discards them.
	Log *slog.Logger
	// DialOptions are appended to the helper's and the client's own, so
	// they win.
	DialOptions []grpc.DialOption
	// Token sends a bearer token on every call (authtoken.Client's
	// Credentials, from --auth-token, SWITCHYARD_AUTH_TOKEN or
	// --client-auth-token-file); nil sends none.
	Token credentials.PerRPCCredentials
	// PreferServing is for a service whose replicas are interchangeable
	// (the registry: every replica fronts the same store). With two or more
	// replicas, calls go to those whose health reports SERVING, spread
	// round-robin, instead of staying on the first one that connects: a
	// replica that is up but cut from its backend reports NOT_SERVING and
	// is left until it serves again. Streams already open on it end with
	// its errors and are opened again elsewhere. With one replica it
	// changes nothing.
	PreferServing bool
}

// Logger is o.Log, or a logger that discards everything.
func (o Options) Logger() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// ErrNoAddress is returned by Dial when the list holds no address.
var ErrNoAddress = errors.New("no address")

// SplitAddrs flattens addrs, each a host:port or a comma-separated list of
// them, into one list, dropping blanks.
func SplitAddrs(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

var schemeSeq atomic.Uint64

// Dial connects to the replicas of service (a name for errors and the
// target) at addrs. It does not wait for a connection. clientOpts are the
// calling client's own defaults (message sizes, call options); opts.DialOptions
// come after them.
func Dial(service string, addrs []string, opts Options, clientOpts ...grpc.DialOption) (*grpc.ClientConn, error) {
	list := SplitAddrs(addrs...)
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: %w", service, ErrNoAddress)
	}
	state := resolver.State{}
	for _, a := range list {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	// A resolver of our own per connection, with every replica: pick_first
	// (gRPC's default policy) tries them in order, which is the failover.
	r := manual.NewBuilderWithScheme(fmt.Sprintf("switchyard-%s-%d", service, schemeSeq.Add(1)))
	r.InitialState(state)
	creds := opts.Credentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dopts := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		// Client spans and W3C trace context on every call; a no-op until
		// obs.SetupTracing installs a provider.
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		// Redial a restarted replica within a second or two, not gRPC's
		// default of up to two minutes: leases and streams wait on it.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
	if opts.Token != nil {
		dopts = append(dopts, grpc.WithPerRPCCredentials(opts.Token))
	}
	if opts.PreferServing && len(list) > 1 {
		// The health of "" is the whole server's (pkg/grpcserver sets
		// every service NOT_SERVING while its backend probe fails).
		dopts = append(dopts, grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`))
	}
	dopts = append(dopts, clientOpts...)
	dopts = append(dopts, opts.DialOptions...)
	cc, err := grpc.NewClient(r.Scheme()+":///"+service, dopts...)
	if err != nil {
		return nil, fmt.Errorf("%s: dial %v: %w", service, list, err)
	}
	return cc, nil
}
