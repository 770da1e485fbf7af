package stacktest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// The per-lease KeepAlive bounds of the registry (services/registry
// leaseauth.go); the test checks the server enforces exactly these.
const (
	maxLeasesPerKeepAlive = 64
	maxStreamsPerLease    = 4
)

// abuseLimits are small limits, so that the test reaches them quickly.
var abuseLimits = grpcserver.Limits{MaxConcurrentStreams: 3, MaxWatchesPerClient: 2}

// serving checks that a service still answers: its health is SERVING.
func serving(t *testing.T, addr string) {
	t.Helper()
	cc := dialRaw(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("%s health after the abuse: %v %v", addr, resp, err)
	}
}

// TestStreamsPerConnection speaks raw HTTP/2 to each service: the server
// announces --max-concurrent-streams in its SETTINGS, and a client that opens
// one stream more than that on one connection has it refused
// (RST_STREAM REFUSED_STREAM) while the streams within the limit stay open;
// the server goes on serving other connections.
func TestStreamsPerConnection(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Mockers: 1, NoFrontend: true, Limits: &abuseLimits})
	for _, svc := range services(s) {
		t.Run(svc.desc.ServiceName, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", svc.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // bounds every read below
			if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(conn, conn)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			var maxStreams uint32
			var hbuf bytes.Buffer
			enc := hpack.NewEncoder(&hbuf)
			open := func(id uint32) {
				hbuf.Reset()
				for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Watch"},
					{":authority", svc.addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
					_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				// No END_STREAM and no request message: the stream stays open
				// in the server, waiting for one.
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true}); err != nil {
					t.Fatal(err)
				}
			}
			settled, opened := false, false
			limit := abuseLimits.MaxConcurrentStreams
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("reading frames (max streams %d announced): %v", maxStreams, err)
				}
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if f.IsAck() {
						break
					}
					if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
						maxStreams = v
					}
					if err := fr.WriteSettingsAck(); err != nil {
						t.Fatal(err)
					}
					settled = true
				case *http2.RSTStreamFrame:
					// Client streams are odd: the limit+1st is 2*limit+1.
					if f.StreamID != 2*limit+1 || f.ErrCode != http2.ErrCodeRefusedStream {
						t.Fatalf("RST_STREAM %d %v, want stream %d refused", f.StreamID, f.ErrCode, 2*limit+1)
					}
					if maxStreams != limit {
						t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want %d", maxStreams, limit)
					}
					serving(t, svc.addr)
					return
				case *http2.GoAwayFrame:
					t.Fatalf("GOAWAY %v instead of refusing one stream", f.ErrCode)
				}
				if settled && !opened {
					opened = true
					for i := range limit + 1 {
						open(2*i + 1)
					}
				}
			}
		})
	}
}

// TestWatchesPerClient opens every long-lived stream kind of the registry
// and the eventbus over real connections: a client (its token) holding
// --max-watches-per-client of them is refused one more with
// ResourceExhausted, another client is not, and closing one frees its slot.
func TestWatchesPerClientOverTheWire(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Auth: true, Mockers: 1, NoFrontend: true, Limits: &abuseLimits})
	reg := registryv1.NewRegistryServiceClient(dialRaw(t, s.RegistryAddr))
	bus := eventbusv1.NewEventBusServiceClient(dialRaw(t, s.EventbusAddr))
	ctx := t.Context()
	if _, err := reg.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: "abuse"}, bearer(s.Tokens[authtoken.RoleAdmin])); err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name string
		open func(ctx context.Context, opt grpc.CallOption) error
	}{
		{"WatchInstances", func(ctx context.Context, opt grpc.CallOption) error {
			st, err := reg.WatchInstances(ctx, &registryv1.WatchInstancesRequest{}, opt)
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"WatchModels", func(ctx context.Context, opt grpc.CallOption) error {
			st, err := reg.WatchModels(ctx, &registryv1.WatchModelsRequest{}, opt)
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"WatchKeys", func(ctx context.Context, opt grpc.CallOption) error {
			st, err := reg.WatchKeys(ctx, &registryv1.WatchKeysRequest{Bucket: "abuse"}, opt)
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"Subscribe", func(ctx context.Context, opt grpc.CallOption) error {
			st, err := bus.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: "dynamo"}, opt)
			if err != nil {
				return err
			}
			// A subscription sends nothing until an event comes; its
			// headers say the server took it. Without headers the stream
			// ended: Recv has its status.
			if md, _ := st.Header(); md != nil {
				return nil
			}
			_, err = st.Recv()
			return err
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			// The router service holds watches of its own with the router
			// token; admin and frontend tokens are this test's alone here.
			client, other := bearer(s.Tokens[authtoken.RoleAdmin]), bearer(s.Tokens[authtoken.RoleFrontend])
			// The previous kind's streams end on the server a moment after
			// the client closed them: until then their slots are taken, so
			// the streams within the limit are opened again until they all
			// are.
			var held context.Context
			release := func() {}
			defer func() { release() }()
			testwait.Until(t, time.Minute, "the streams within the limit open", func() bool {
				release()
				held, release = context.WithCancel(ctx)
				for i := range abuseLimits.MaxWatchesPerClient {
					if err := k.open(held, client); err != nil {
						if status.Code(err) != codes.ResourceExhausted {
							t.Fatalf("stream %d within the limit: %v", i, err)
						}
						return false
					}
				}
				return true
			})
			// The server takes a slot as the handler starts; a stream whose
			// headers came back may not have reached it yet, so the refusal
			// is awaited, not assumed.
			refusedOne := func() bool {
				octx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				return status.Code(k.open(octx, client)) == codes.ResourceExhausted
			}
			testwait.Until(t, time.Minute, "one stream over the limit refused with ResourceExhausted", refusedOne)
			octx, cancel := context.WithCancel(ctx)
			defer cancel()
			if err := k.open(octx, other); err != nil {
				t.Fatalf("another client's stream: %v", err)
			}
			release()
			testwait.Until(t, time.Minute, "a slot back once the client closed its streams", func() bool {
				octx, cancel := context.WithCancel(ctx)
				defer cancel()
				return k.open(octx, client) == nil
			})
		})
	}
	serving(t, s.RegistryAddr)
	serving(t, s.EventbusAddr)
}

// TestKeepAliveLimits: one lease may be kept alive by at most four
// KeepAlive streams at once, and one stream refreshes at most 64 leases; the
// stream over a limit ends with ResourceExhausted, the others go on.
func TestKeepAliveLimits(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Auth: true, Mockers: 1, NoFrontend: true})
	reg := registryv1.NewRegistryServiceClient(dialRaw(t, s.RegistryAddr))
	worker := bearer(s.Tokens[authtoken.RoleWorker])
	ctx := t.Context()
	grant := func() (uint64, string) {
		t.Helper()
		r, err := reg.GrantLease(ctx, &registryv1.GrantLeaseRequest{TtlSeconds: 30}, worker)
		if err != nil {
			t.Fatal(err)
		}
		return r.LeaseId, r.LeaseToken
	}
	keepAlive := func(ctx context.Context, tokens []string, leases ...uint64) (registryv1.RegistryService_KeepAliveClient, error) {
		md := metadata.MD{authtoken.LeaseTokenKey: tokens}
		st, err := reg.KeepAlive(metadata.NewOutgoingContext(ctx, md), worker)
		if err != nil {
			return nil, err
		}
		for _, id := range leases {
			if err := st.Send(&registryv1.KeepAliveRequest{LeaseId: id}); err != nil {
				return nil, err
			}
			resp, err := st.Recv()
			if err != nil {
				return nil, err
			}
			if !resp.Found || resp.LeaseId != id {
				return nil, errors.New("keep-alive answered " + resp.String())
			}
		}
		return st, nil
	}

	t.Run("streams per lease", func(t *testing.T) {
		id, tok := grant()
		held, release := context.WithCancel(ctx)
		defer release()
		for i := range maxStreamsPerLease {
			if _, err := keepAlive(held, []string{tok}, id); err != nil {
				t.Fatalf("stream %d of the lease: %v", i, err)
			}
		}
		if _, err := keepAlive(ctx, []string{tok}, id); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("stream %d of one lease: %v, want ResourceExhausted", maxStreamsPerLease+1, err)
		}
		release()
		testwait.Until(t, time.Minute, "a KeepAlive stream of the lease accepted once the others closed", func() bool {
			octx, cancel := context.WithCancel(ctx)
			defer cancel()
			_, err := keepAlive(octx, []string{tok}, id)
			return err == nil
		})
	})
	t.Run("leases per stream", func(t *testing.T) {
		var ids []uint64
		var toks []string
		for range maxLeasesPerKeepAlive + 1 {
			id, tok := grant()
			ids, toks = append(ids, id), append(toks, tok)
		}
		st, err := keepAlive(ctx, toks, ids[:maxLeasesPerKeepAlive]...)
		if err != nil {
			t.Fatalf("%d leases on one stream: %v", maxLeasesPerKeepAlive, err)
		}
		if err := st.Send(&registryv1.KeepAliveRequest{LeaseId: ids[maxLeasesPerKeepAlive]}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("lease %d on one stream: %v, want ResourceExhausted", maxLeasesPerKeepAlive+1, err)
		}
		// The same lease on a stream of its own is fine.
		if _, err := keepAlive(ctx, toks[maxLeasesPerKeepAlive:], ids[maxLeasesPerKeepAlive]); err != nil {
			t.Fatal(err)
		}
	})
	serving(t, s.RegistryAddr)
}

// TestMessageSizes sends requests over each server's receive limit (gRPC's
// 4 MiB for the registry and the router, eventbus.MaxMessageSize for the
// eventbus): each is ResourceExhausted and the server goes on serving; an
// event over NATS's max_payload but under the gRPC limit is InvalidArgument
// naming the limit.
func TestMessageSizes(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{Auth: true, Mockers: 1, NoFrontend: true})
	ctx := t.Context()
	admin := bearer(s.Tokens[authtoken.RoleAdmin])
	reg := registryv1.NewRegistryServiceClient(dialRaw(t, s.RegistryAddr))
	rt := routerv1.NewRouterServiceClient(dialRaw(t, s.RouterAddr))
	// The eventbus client would refuse to send over its own limit; this one
	// sends what it is given.
	bus := eventbusv1.NewEventBusServiceClient(dialRaw(t, s.EventbusAddr, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(eventbus.MaxMessageSize+(4<<20)))))
	const grpcDefault = 4 << 20
	big := strings.Repeat("x", grpcDefault+1)
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"registry PutKey over 4 MiB", func() error {
			_, err := reg.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: "b", Key: "k", Value: []byte(big)}, admin)
			return err
		}, codes.ResourceExhausted},
		{"registry Register over 4 MiB", func() error {
			_, err := reg.Register(ctx, &registryv1.RegisterRequest{Instance: &registryv1.Instance{Namespace: big}}, admin)
			return err
		}, codes.ResourceExhausted},
		{"router Route over 4 MiB", func() error {
			_, err := rt.Route(ctx, &routerv1.RouteRequest{RequestId: "r", TokenIds: make([]uint32, grpcDefault)}, admin)
			return err
		}, codes.ResourceExhausted},
		{"eventbus Publish over max_payload", func() error {
			_, err := bus.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "dynamo.backend.kv_cache_update",
				Payload: make([]byte, natsserver.MAX_PAYLOAD_SIZE+1)}}, admin)
			// The reason clients branch on, and a message that names the limit for people.
			if err != nil && (!apierr.Is(err, codes.InvalidArgument, apierr.ReasonPayloadTooLarge) || !strings.Contains(err.Error(), "max_payload")) {
				return errors.New("the error is not PAYLOAD_TOO_LARGE naming max_payload: " + err.Error())
			}
			return err
		}, codes.InvalidArgument},
		{"eventbus Publish over its gRPC limit", func() error {
			_, err := bus.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "dynamo.backend.kv_cache_update",
				Payload: make([]byte, eventbus.MaxMessageSize+1)}}, admin)
			return err
		}, codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); status.Code(err) != tt.want {
				t.Fatalf("%v, want %v", err, tt.want)
			}
		})
	}
	for _, svc := range services(s) {
		serving(t, svc.addr)
	}
}
