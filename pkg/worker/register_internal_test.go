package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestRegisterRetriesTheCardOnItsLease: a model card call that fails after
// the instance registered (the replica answering it lost etcd) is retried on
// the same lease when a later call may succeed, so the instance keeps its id
// and nobody sees it deleted; an error no retry changes fails the
// registration and revokes the lease, leaving nothing listed. The failures
// are injected in the worker's connection to a real registry.
func TestRegisterRetriesTheCardOnItsLease(t *testing.T) {
	t.Parallel()
	_, reg := registrytest.Start(t)
	for _, tc := range []struct {
		name     string
		failures int64
		code     codes.Code
		wantErr  bool
	}{
		{"no failure", 0, codes.OK, false},
		{"one unavailable", 1, codes.Unavailable, false},
		{"three unavailable", 3, codes.Unavailable, false},
		{"refused", 1, codes.InvalidArgument, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var calls atomic.Int64
			fail := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if strings.HasSuffix(method, "/RegisterModel") && calls.Add(1) <= tc.failures {
					return status.Error(tc.code, "injected")
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})
			c, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{DialOptions: []grpc.DialOption{fail}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ns := strings.ReplaceAll(strings.ToLower(tc.name), " ", "-")
			w := &Worker{reg: c, log: slog.New(slog.DiscardHandler), cfg: Config{LeaseTTL: 5 * time.Second}}
			want := &registryv1.Instance{Namespace: ns, Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: "127.0.0.1:9"}}
			card := &registryv1.ModelCard{Namespace: ns, Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4, ContextLength: 1024}
			sess, in, err := w.register(ctx, want, card)
			if sess != nil {
				defer sess.Close(context.Background())
			}
			wantCalls := tc.failures + 1 // the failures, then the call that passes
			if tc.wantErr {
				wantCalls = tc.failures // the first refusal ends it
			}
			if got := calls.Load(); got != wantCalls {
				t.Errorf("RegisterModel called %d times, want %d", got, wantCalls)
			}
			list, lerr := c.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: ns}})
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tc.wantErr {
				if status.Code(err) != tc.code || len(list.Instances) != 0 {
					t.Fatalf("register = %v with %d instances listed; want %v and the lease revoked", err, len(list.Instances), tc.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("register = %v", err)
			}
			cards, cerr := c.Raw().ListModels(ctx, &registryv1.ListModelsRequest{Filter: &registryv1.ModelFilter{Namespace: ns}})
			if cerr != nil || len(list.Instances) != 1 || list.Instances[0].InstanceId != sess.ID() || in.InstanceId != sess.ID() ||
				len(cards.Cards) != 1 || cards.Cards[0].InstanceId != sess.ID() {
				t.Fatalf("after register: instances %v, cards %v (%v); want one of each on lease %x", list.Instances, cards.GetCards(), cerr, sess.ID())
			}
		})
	}
}
