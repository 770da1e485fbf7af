package stacktest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// rawCodec sends a request's bytes as they are and hands back the
// response's, so that the fuzzer, not a Go type, decides what goes on the
// wire. It is named "proto" so that the server decodes with its own codec.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// mayBlock are unary RPCs that wait by design (a read lock polls until it
// is free); for them a deadline is an answer, not a hang.
var mayBlock = map[string]bool{
	"/switchyard.registry.v1.RegistryService/AcquireReadLock": true,
}

// callRaw sends msg as the request of m and returns the call's status. A
// stream is read until it ends or stays open past a short deadline (a
// watch that accepted its request streams on: that is an answer too).
func callRaw(ctx context.Context, cc *grpc.ClientConn, m method, msg []byte, opts ...grpc.CallOption) error {
	opts = append(opts, grpc.ForceCodec(rawCodec{}))
	if !m.clientStreams && !m.serverStreaming {
		timeout := 20 * time.Second // a hang, not a slow machine
		if mayBlock[m.full] {
			timeout = time.Second
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var out []byte
		err := cc.Invoke(ctx, m.full, &msg, &out, opts...)
		if mayBlock[m.full] && status.Code(err) == codes.DeadlineExceeded {
			return nil
		}
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: m.clientStreams, ServerStreams: m.serverStreaming}, m.full, opts...)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&msg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for range 100 {
		var out []byte
		err := st.RecvMsg(&out)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case status.Code(err) == codes.DeadlineExceeded && ctx.Err() != nil:
			return nil // still streaming
		case err != nil:
			return err
		}
	}
	return nil
}

// FuzzRPC sends arbitrary bytes as the request message of every RPC of the
// registry, eventbus, router and a worker's WorkerService over a real gRPC connection, with the admin
// token so that the bytes reach the handlers: each call must end with a
// status that is not Unknown, nor Internal unless gRPC could not decode the
// bytes as the request type (a recovered panic is Internal),
// unary calls must answer before their deadline, and the server must still
// answer health checks afterwards. The seeds are every RPC with an empty
// message, random bytes, a truncated field, and a valid request of another
// RPC's type; `go test -fuzz FuzzRPC` explores from there.
func FuzzRPC(f *testing.F) {
	s := stacktest.Start(f, stacktest.Options{Auth: true, Mockers: 1, NoFrontend: true})
	type target struct {
		m    method
		cc   *grpc.ClientConn
		addr string
		// input is the request type, to tell bytes that decode from
		// bytes that do not.
		input protoreflect.MessageType
	}
	var targets []target
	// The three services and a worker's own gRPC API (WorkerService).
	all := append(services(s), service{addr: s.Mockers[0].APIAddr(), desc: workerv1.WorkerService_ServiceDesc})
	for _, svc := range all {
		cc := dialRaw(f, svc.addr)
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc.desc.ServiceName))
		if err != nil {
			f.Fatal(err)
		}
		sd := d.(protoreflect.ServiceDescriptor)
		for _, m := range methods(svc.desc) {
			md := sd.Methods().ByName(protoreflect.Name(m.full[strings.LastIndexByte(m.full, '/')+1:]))
			if md == nil {
				f.Fatalf("%s: no descriptor", m.full)
			}
			targets = append(targets, target{m: m, cc: cc, addr: svc.addr, input: dynamicpb.NewMessageType(md.Input())})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	others := [][]byte{
		mustMarshal(f, &registryv1.RegisterRequest{Instance: &registryv1.Instance{Namespace: "fuzz", Component: "c", Endpoint: "e",
			Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}}),
		mustMarshal(f, &routerv1.RouteRequest{RequestId: "fuzz", TokenIds: []uint32{1, 2, 3}}),
	}
	for i := range targets {
		random := make([]byte, 1+rng.IntN(64))
		for j := range random {
			random[j] = byte(rng.Uint32())
		}
		f.Add(uint16(i), []byte{})
		f.Add(uint16(i), random)
		f.Add(uint16(i), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // field 1, a length far past the end
		f.Add(uint16(i), others[i%len(others)])
	}
	admin := bearer(s.Tokens[authtoken.RoleAdmin])
	f.Fuzz(func(t *testing.T, which uint16, msg []byte) {
		tg := targets[int(which)%len(targets)]
		err := callRaw(t.Context(), tg.cc, tg.m, msg, admin)
		// Bytes that are not a message of the request type are Internal
		// from gRPC itself (its code for a message it cannot parse); bytes
		// that decode reach the handler, which must answer with a code of
		// its own: Internal there is an unmapped error or a recovered panic.
		decodes := proto.Unmarshal(msg, tg.input.New().Interface()) == nil
		switch code := status.Code(err); {
		case code == codes.Unknown, code == codes.Internal && decodes:
			t.Fatalf("%s with % x: %v", tg.m.full, msg, err)
		case code == codes.DeadlineExceeded && !tg.m.serverStreaming && !tg.m.clientStreams:
			t.Fatalf("%s with % x: no answer before the deadline: %v", tg.m.full, msg, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if resp, err := healthpb.NewHealthClient(tg.cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%s after %s with % x: health %v %v", tg.addr, tg.m.full, msg, resp, err)
		}
	})
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
