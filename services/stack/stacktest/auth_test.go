package stacktest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/google/go-cmp/cmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/registry"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// service is one gRPC service of the stack: its address, descriptor and
// the role table its server enforces.
type service struct {
	addr   string
	desc   grpc.ServiceDesc
	policy grpcserver.Policy
}

func services(s *stacktest.Stack) []service {
	return []service{
		{s.RegistryAddr, registryv1.RegistryService_ServiceDesc, registry.Policy},
		{s.EventbusAddr, eventbusv1.EventBusService_ServiceDesc, eventbus.Policy},
		{s.RouterAddr, routerv1.RouterService_ServiceDesc, router.Policy},
	}
}

// method is one RPC of a service, streaming or not.
type method struct {
	full                           string
	clientStreams, serverStreaming bool
}

func methods(d grpc.ServiceDesc) []method {
	var out []method
	for _, m := range d.Methods {
		out = append(out, method{full: "/" + d.ServiceName + "/" + m.MethodName})
	}
	for _, st := range d.Streams {
		out = append(out, method{full: "/" + d.ServiceName + "/" + st.StreamName, clientStreams: st.ClientStreams, serverStreaming: st.ServerStreams})
	}
	return out
}

func dialRaw(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// invoke calls m with req (an empty message when nil) and returns the
// call's status: for a stream, that of its first answer (a stream that
// answers with a message is OK).
func invoke(ctx context.Context, cc *grpc.ClientConn, m method, req proto.Message, opts ...grpc.CallOption) error {
	if req == nil {
		req = &emptypb.Empty{}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !m.clientStreams && !m.serverStreaming {
		return cc.Invoke(ctx, m.full, req, &emptypb.Empty{}, opts...)
	}
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: m.clientStreams, ServerStreams: m.serverStreaming}, m.full, opts...)
	if err != nil {
		return err
	}
	if err := st.SendMsg(req); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	err = st.RecvMsg(&emptypb.Empty{})
	if err == io.EOF {
		return nil
	}
	return err
}

func bearer(tok string) grpc.CallOption { return grpc.PerRPCCredentials(authtoken.Bearer(tok)) }

// TestRolesPerRPC calls every RPC of the registry, eventbus and router with
// no token, an unknown token and each role's token, and checks the answer
// against the role table: Unauthenticated without a known token,
// PermissionDenied for a role the table leaves out, anything else (the call
// reached the service) for the roles it lists and for admin.
func TestRolesPerRPC(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Auth: true, Mockers: 1, NoFrontend: true})
	ctx := t.Context()
	for _, svc := range services(s) {
		cc := dialRaw(t, svc.addr)
		for _, m := range methods(svc.desc) {
			t.Run(strings.TrimPrefix(m.full, "/switchyard."), func(t *testing.T) {
				if err := invoke(ctx, cc, m, nil); status.Code(err) != codes.Unauthenticated {
					t.Errorf("without a token: %v, want Unauthenticated", err)
				}
				if err := invoke(ctx, cc, m, nil, bearer("not-a-token")); status.Code(err) != codes.Unauthenticated {
					t.Errorf("with an unknown token: %v, want Unauthenticated", err)
				}
				allowed := svc.policy.Roles(m.full)
				for _, role := range authtoken.Roles {
					err := invoke(ctx, cc, m, nil, bearer(s.Tokens[role]))
					code := status.Code(err)
					if slices.Contains(allowed, role) {
						if code == codes.PermissionDenied && apierr.Reason(err) != apierr.ReasonLeaseTokenRequired || code == codes.Unauthenticated {
							t.Errorf("role %s, allowed: %v", role, err)
						}
					} else if code != codes.PermissionDenied {
						t.Errorf("role %s, not allowed: %v, want PermissionDenied", role, err)
					}
				}
			})
		}
		// Health stays open to probes without a token.
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("health of %s without a token: %v", svc.desc.ServiceName, err)
		}
	}
}

// state is everything the stack's services store: every etcd key with its
// value, lease and revision; the JetStream streams, durable consumers and
// message counts; the router's view of workers and requests.
func state(t *testing.T, s *stacktest.Stack) string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Etcd.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(t.Context(), "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "etcd %s=%q lease %x mod %d\n", kv.Key, kv.Value, kv.Lease, kv.ModRevision)
	}
	leases, err := cli.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "etcd leases %d\n", len(leases.Leases))
	jsz, err := s.NATS.Jsz(&natsserver.JSzOptions{Accounts: true, Streams: true, Consumer: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, acc := range jsz.AccountDetails {
		for _, st := range acc.Streams {
			// An empty stream is no state: the router creates a
			// namespace's stream when it first subscribes.
			if st.State.LastSeq == 0 && !slices.ContainsFunc(st.Consumer, func(c *natsserver.ConsumerInfo) bool { return c.Config != nil && c.Config.Durable != "" }) {
				continue
			}
			fmt.Fprintf(&b, "stream %s msgs %d bytes %d last %d\n", st.Name, st.State.Msgs, st.State.Bytes, st.State.LastSeq)
			// Durable consumers only: the router opens and closes
			// ephemeral ones on its own as workers come and go.
			for _, c := range st.Consumer {
				if c.Config != nil && c.Config.Durable != "" {
					fmt.Fprintf(&b, "  consumer %s acked %d\n", c.Name, c.AckFloor.Stream)
				}
			}
		}
	}
	stats, err := json.Marshal(s.Router.Core().Stats())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "router %s\n", stats)
	return b.String()
}

// TestUnauthenticatedCallsChangeNothing sends each mutating RPC a request
// that would change the stack (the same requests succeed with the right
// token, checked after), without a token and with a role that may not call
// it, and checks that the stored state did not move.
func TestUnauthenticatedCallsChangeNothing(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Auth: true, Mockers: 1, NoFrontend: true})
	ctx := t.Context()
	reg, bus, rt := dialRaw(t, s.RegistryAddr), dialRaw(t, s.EventbusAddr), dialRaw(t, s.RouterAddr)
	worker := s.Mockers[0]
	lease := worker.InstanceID()
	inst := &registryv1.Instance{Namespace: "attack", Component: "backend", Endpoint: "generate",
		Transport: &commonv1.Transport{Tcp: "10.0.0.66:1"}}
	card := &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "junk", BlockSize: 16}
	event := &eventbusv1.Event{Subject: "dynamo.backend.kv_cache_update", Payload: []byte("junk")}

	type call struct {
		name string
		cc   *grpc.ClientConn
		m    method
		req  proto.Message
		// wrongRole may not call it.
		wrongRole authtoken.Role
	}
	r := func(name string) method { return method{full: "/switchyard.registry.v1.RegistryService/" + name} }
	e := func(name string) method { return method{full: "/switchyard.eventbus.v1.EventBusService/" + name} }
	ro := func(name string) method { return method{full: "/switchyard.router.v1.RouterService/" + name} }
	calls := []call{
		{"GrantLease", reg, r("GrantLease"), &registryv1.GrantLeaseRequest{TtlSeconds: 60}, authtoken.RoleFrontend},
		{"Register new lease", reg, r("Register"), &registryv1.RegisterRequest{Instance: inst, TtlSeconds: 60}, authtoken.RoleFrontend},
		{"Register on the worker's lease", reg, r("Register"), &registryv1.RegisterRequest{Instance: inst, LeaseId: lease}, authtoken.RoleRouter},
		{"KeepAlive", reg, method{full: "/switchyard.registry.v1.RegistryService/KeepAlive", clientStreams: true, serverStreaming: true}, &registryv1.KeepAliveRequest{LeaseId: lease}, authtoken.RoleFrontend},
		{"Deregister", reg, r("Deregister"), &registryv1.DeregisterRequest{LeaseId: lease}, authtoken.RoleRouter},
		{"RegisterModel", reg, r("RegisterModel"), &registryv1.RegisterModelRequest{Card: card, LeaseId: lease}, authtoken.RoleFrontend},
		{"CreateBucket", reg, r("CreateBucket"), &registryv1.CreateBucketRequest{Bucket: "attack"}, authtoken.RoleFrontend},
		{"PutKey", reg, r("PutKey"), &registryv1.PutKeyRequest{Bucket: "attack", Key: "k", Value: []byte("v")}, authtoken.RoleFrontend},
		{"CreateKey", reg, r("CreateKey"), &registryv1.CreateKeyRequest{Bucket: "attack", Key: "k", Value: []byte("v")}, authtoken.RoleFrontend},
		{"DeleteKey", reg, r("DeleteKey"), &registryv1.DeleteKeyRequest{Bucket: "attack", Key: "k"}, authtoken.RoleFrontend},
		{"AcquireWriteLock", reg, r("AcquireWriteLock"), &registryv1.AcquireWriteLockRequest{Name: "attack", LeaseId: lease}, authtoken.RoleFrontend},
		{"AcquireReadLock", reg, r("AcquireReadLock"), &registryv1.AcquireReadLockRequest{Name: "attack", LeaseId: lease, TimeoutMs: 100}, authtoken.RoleFrontend},
		{"ReleaseLock", reg, r("ReleaseLock"), &registryv1.ReleaseLockRequest{Token: "attack/write/1"}, authtoken.RoleFrontend},
		{"Publish", bus, e("Publish"), &eventbusv1.PublishRequest{Event: event}, authtoken.RoleFrontend},
		{"PublishStream", bus, method{full: "/switchyard.eventbus.v1.EventBusService/PublishStream", clientStreams: true, serverStreaming: true},
			&eventbusv1.PublishStreamRequest{Events: []*eventbusv1.Event{event}}, authtoken.RoleFrontend},
		{"Ack", bus, e("Ack"), &eventbusv1.AckRequest{AckTokens: []string{"$JS.ACK.dynamo.c.1.1.1.1.0"}}, authtoken.RoleWorker},
		{"DeleteConsumer", bus, e("DeleteConsumer"), &eventbusv1.DeleteConsumerRequest{Namespace: "dynamo", DurableName: "c"}, authtoken.RoleRouter},
		{"PutObject", bus, method{full: "/switchyard.eventbus.v1.EventBusService/PutObject", clientStreams: true},
			&eventbusv1.PutObjectRequest{Part: &eventbusv1.PutObjectRequest_Header{Header: &eventbusv1.PutObjectHeader{Bucket: "tokenizers", Name: "junk"}}}, authtoken.RoleFrontend},
		{"DeleteObject", bus, e("DeleteObject"), &eventbusv1.DeleteObjectRequest{Bucket: "tokenizers", Name: "Qwen/Qwen3-0.6B/tokenizer.json"}, authtoken.RoleWorker},
		{"Route", rt, ro("Route"), &routerv1.RouteRequest{RequestId: "attack", Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: stacktest.Model}}, TokenIds: []uint32{1, 2, 3, 4}}, authtoken.RoleWorker},
		{"MarkPrefillComplete", rt, ro("MarkPrefillComplete"), &routerv1.MarkPrefillCompleteRequest{RequestId: "attack"}, authtoken.RoleWorker},
		{"Free", rt, ro("Free"), &routerv1.FreeRequest{RequestId: "attack"}, authtoken.RoleWorker},
	}
	before := state(t, s)
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := invoke(ctx, c.cc, c.m, c.req); status.Code(err) != codes.Unauthenticated {
				t.Errorf("without a token: %v, want Unauthenticated", err)
			}
			if err := invoke(ctx, c.cc, c.m, c.req, bearer(s.Tokens[c.wrongRole])); status.Code(err) != codes.PermissionDenied {
				t.Errorf("as %s: %v, want PermissionDenied", c.wrongRole, err)
			}
		})
	}
	if after := state(t, s); after != before {
		t.Fatalf("refused calls changed the stack:\n%s", cmp.Diff(before, after))
	}
	// The state sees a change when one is allowed: the same Publish and
	// CreateBucket with a worker's token.
	for _, c := range calls {
		if c.name != "Publish" && c.name != "CreateBucket" {
			continue
		}
		if err := invoke(ctx, c.cc, c.m, c.req, bearer(s.Tokens[authtoken.RoleWorker])); err != nil {
			t.Fatalf("%s with a worker token: %v", c.name, err)
		}
	}
	if after := state(t, s); after == before {
		t.Fatal("an allowed Publish and CreateBucket left the state as it was: the check sees nothing")
	}

	// A worker's token does not let one worker end another's lease: the
	// lease's own token is missing.
	deregister := r("Deregister")
	err := invoke(ctx, reg, deregister, &registryv1.DeregisterRequest{LeaseId: lease}, bearer(s.Tokens[authtoken.RoleWorker]))
	if !apierr.Is(err, codes.PermissionDenied, apierr.ReasonLeaseTokenRequired) {
		t.Fatalf("Deregister of another worker's lease with a worker token: %v, want PermissionDenied for the lease", err)
	}
	// A worker with its own lease token may (and the admin may fence it).
	other, err := registryv1.NewRegistryServiceClient(reg).GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 30}, bearer(s.Tokens[authtoken.RoleWorker]))
	if err != nil {
		t.Fatal(err)
	}
	own := metadata.AppendToOutgoingContext(ctx, authtoken.LeaseTokenKey, other.LeaseToken)
	if err := invoke(own, reg, deregister, &registryv1.DeregisterRequest{LeaseId: lease}, bearer(s.Tokens[authtoken.RoleWorker])); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Deregister with another lease's token: %v, want PermissionDenied", err)
	}
	if err := invoke(own, reg, deregister, &registryv1.DeregisterRequest{LeaseId: other.LeaseId}, bearer(s.Tokens[authtoken.RoleWorker])); err != nil {
		t.Fatalf("Deregister of its own lease: %v", err)
	}
	if after := state(t, s); !strings.Contains(after, fmt.Sprintf("%x", lease)) {
		t.Fatal("the worker's registration is gone")
	}
	if err := invoke(ctx, reg, deregister, &registryv1.DeregisterRequest{LeaseId: lease}, bearer(s.Tokens[authtoken.RoleAdmin])); err != nil {
		t.Fatalf("admin fencing the worker: %v", err)
	}
}

// TestTokensEndToEnd runs the stack with tokens everywhere: the mocker
// registers and publishes with its worker token, the router reads and
// subscribes with its own, and the frontend serves a chat completion
// through them.
func TestTokensEndToEnd(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Auth: true, Mockers: 2})
	body := `{"model": "` + stacktest.Model + `", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4}`
	resp, err := http.Post(s.FrontendURL+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat completion: %d %s", resp.StatusCode, out)
	}
}
