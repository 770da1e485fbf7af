package stacktest_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// TestNamespaceScopedTokens: a worker token limited to namespace team-a
// (token file "worker TOKEN namespace=team-a") registers instances and
// models and publishes events in team-a, and is PermissionDenied for each of
// them in team-b, over real connections; an unlimited worker token is not.
func TestNamespaceScopedTokens(t *testing.T) {
	const scoped = "scoped-worker-token-0123456789"
	s := stacktest.Start(t, stacktest.Options{Auth: true, Mockers: 1, NoFrontend: true,
		ExtraTokens: "worker " + authtoken.Hash(scoped) + " namespace=team-a\n"})
	ctx := t.Context()
	reg := registryv1.NewRegistryServiceClient(dialRaw(t, s.RegistryAddr))
	bus := eventbusv1.NewEventBusServiceClient(dialRaw(t, s.EventbusAddr))
	instance := func(ns string) *registryv1.Instance {
		return &registryv1.Instance{Namespace: ns, Component: "backend", Endpoint: "generate",
			Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}
	}
	event := func(ns string) *eventbusv1.Event {
		return &eventbusv1.Event{Subject: ns + ".backend.kv_cache_update", Payload: []byte("x")}
	}
	type calls struct {
		register, registerModel, publish, publishStream error
	}
	do := func(token, ns string) calls {
		t.Helper()
		var c calls
		_, c.register = reg.Register(ctx, &registryv1.RegisterRequest{Instance: instance(ns), TtlSeconds: 30}, bearer(token))
		// The model goes on a lease of the token's own namespace, so that
		// only the card's namespace differs.
		own, err := reg.Register(ctx, &registryv1.RegisterRequest{Instance: instance("team-a"), TtlSeconds: 30}, bearer(token))
		if err != nil {
			t.Fatal(err)
		}
		lctx := metadata.AppendToOutgoingContext(ctx, authtoken.LeaseTokenKey, own.LeaseToken)
		_, c.registerModel = reg.RegisterModel(lctx, &registryv1.RegisterModelRequest{LeaseId: own.InstanceId, Card: &registryv1.ModelCard{
			Namespace: ns, Component: "backend", Endpoint: "generate", ModelName: "m-" + ns, BlockSize: 16}}, bearer(token))
		_, c.publish = bus.Publish(ctx, &eventbusv1.PublishRequest{Event: event(ns)}, bearer(token))
		st, err := bus.PublishStream(ctx, bearer(token))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&eventbusv1.PublishStreamRequest{BatchId: 1, Events: []*eventbusv1.Event{event("team-a"), event(ns)}}); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		_, c.publishStream = st.Recv()
		return c
	}
	check := func(t *testing.T, c calls, want codes.Code) {
		t.Helper()
		for name, err := range map[string]error{"Register": c.register, "RegisterModel": c.registerModel, "Publish": c.publish, "PublishStream": c.publishStream} {
			if status.Code(err) != want {
				t.Errorf("%s: %v, want %v", name, err, want)
			}
		}
	}
	t.Run("scoped token in its namespace", func(t *testing.T) { check(t, do(scoped, "team-a"), codes.OK) })
	t.Run("scoped token elsewhere", func(t *testing.T) { check(t, do(scoped, "team-b"), codes.PermissionDenied) })
	t.Run("unlimited worker token elsewhere", func(t *testing.T) { check(t, do(s.Tokens[authtoken.RoleWorker], "team-b"), codes.OK) })
}
