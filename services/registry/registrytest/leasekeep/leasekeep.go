// Package leasekeep makes a test's raw registry client send lease tokens as
// pkg/registryclient does, for tests that call the registry RPCs directly. It
// imports nothing of the registry, so the registry's own tests can use it.
package leasekeep

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
)

// Keeper makes a test's raw registry client behave as pkg/registryclient
// does: it keeps the token of every lease the client was granted and sends
// it on the calls that use that lease (on a KeepAlive stream, the tokens of
// every lease granted so far). Tests of lease ownership itself dial without
// it.
type Keeper struct {
	mu     sync.Mutex
	tokens map[uint64]string
}

// New returns a Keeper that knows no lease yet.
func New() *Keeper { return &Keeper{tokens: map[uint64]string{}} }

// DialOptions install the Keeper on a connection.
func (k *Keeper) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithUnaryInterceptor(k.unary), grpc.WithStreamInterceptor(k.stream)}
}

func (k *Keeper) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(interface{ GetLeaseId() uint64 }); ok && r.GetLeaseId() != 0 {
		k.mu.Lock()
		tok := k.tokens[r.GetLeaseId()]
		k.mu.Unlock()
		if tok != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, authtoken.LeaseTokenKey, tok)
		}
	}
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch r := reply.(type) {
	case *registryv1.GrantLeaseResponse:
		k.tokens[r.LeaseId] = r.LeaseToken
	case *registryv1.RegisterResponse:
		if r.LeaseToken != "" {
			k.tokens[r.InstanceId] = r.LeaseToken
		}
	}
	return nil
}

func (k *Keeper) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method == registryv1.RegistryService_KeepAlive_FullMethodName {
		k.mu.Lock()
		for _, tok := range k.tokens {
			ctx = metadata.AppendToOutgoingContext(ctx, authtoken.LeaseTokenKey, tok)
		}
		k.mu.Unlock()
	}
	return streamer(ctx, desc, cc, method, opts...)
}
