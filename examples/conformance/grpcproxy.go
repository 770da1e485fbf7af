package conformance

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ProxyHooks let a test see, and hold, what passes a [StartGRPCProxy]
// proxy. Each runs on the call's own goroutine: blocking holds that call
// only.
type ProxyHooks struct {
	// Request runs before each request message of method goes on to the
	// backend, with the message's bytes.
	Request func(method string, msg []byte)
	// Answer runs before each answer message of method goes back to the
	// caller.
	Answer func(method string, msg []byte)
	// Refuse runs when a call of method arrives, before anything goes on to
	// the backend: a non-nil error answers the call with it, and the
	// backend never sees the call.
	Refuse func(method string) error
}

// HoldAnswer starts a [StartGRPCProxy] proxy to backend that holds the
// first answer of method (a full method name) until release is called:
// held is closed once that answer has come back from the backend, so the
// backend has done the call while its caller still waits. release may be
// called more than once. The tests that hold a worker's RegisterModel
// answer use it to serve requests between the card being stored and the
// worker's start returning.
func HoldAnswer(t testing.TB, backend, method string) (addr string, held <-chan struct{}, release func()) {
	t.Helper()
	heldc, releasec := make(chan struct{}), make(chan struct{})
	hold := sync.OnceFunc(func() { close(heldc); <-releasec })
	release = sync.OnceFunc(func() { close(releasec) })
	addr = StartGRPCProxy(t, backend, ProxyHooks{Answer: func(m string, _ []byte) {
		if m == method {
			hold()
		}
	}})
	return addr, heldc, release
}

// RefuseFirst starts a [StartGRPCProxy] proxy to backend that answers the
// first n calls of method (a full method name) with code itself, as a
// registry replica that lost its etcd would, and passes every other call on.
// calls reports how many calls of a method reached the proxy, refused ones
// included.
func RefuseFirst(t testing.TB, backend, method string, n int, code codes.Code) (addr string, calls func(method string) int) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	addr = StartGRPCProxy(t, backend, ProxyHooks{Refuse: func(m string) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m]++
		if m == method && seen[m] <= n {
			return status.Errorf(code, "refused by the test's proxy (call %d of the first %d)", seen[m], n)
		}
		return nil
	}})
	return addr, func(m string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[m]
	}
}

// StartGRPCProxy serves every gRPC method on 127.0.0.1:0 by forwarding it to
// backend: metadata, each message, headers, trailers and status, with hooks
// on the messages. It returns the proxy's address and stops in t's cleanup.
// A test puts it between a worker process and a service to hold a call at
// the moment it wants (a registration answered late, say).
func StartGRPCProxy(t testing.TB, backend string, hooks ProxyHooks) string {
	t.Helper()
	cc, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hook := func(f func(string, []byte), method string, msg []byte) {
		if f != nil {
			f(method, msg)
		}
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		if hooks.Refuse != nil {
			if err := hooks.Refuse(method); err != nil {
				return err
			}
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		out := metadata.MD{}
		for k, v := range md {
			// The transport's own headers are set again by the client.
			if !strings.HasPrefix(k, ":") && k != "content-type" && k != "user-agent" && k != "te" {
				out[k] = v
			}
		}
		ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), out))
		defer cancel()
		cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			return err
		}
		go func() {
			for {
				f := &rawFrame{}
				if err := ss.RecvMsg(f); err != nil {
					if errors.Is(err, io.EOF) {
						_ = cs.CloseSend()
					} else {
						cancel()
					}
					return
				}
				hook(hooks.Request, method, f.b)
				if cs.SendMsg(f) != nil {
					return
				}
			}
		}()
		if h, err := cs.Header(); err == nil {
			_ = ss.SendHeader(h)
		}
		for {
			f := &rawFrame{}
			if err := cs.RecvMsg(f); err != nil {
				ss.SetTrailer(cs.Trailer())
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			hook(hooks.Answer, method, f.b)
			if err := ss.SendMsg(f); err != nil {
				return err
			}
		}
	}))
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = cc.Close()
	})
	return l.Addr().String()
}

// rawFrame is one gRPC message as the proxy forwards it, undecoded.
type rawFrame struct{ b []byte }

// rawCodec passes rawFrames through as they are. It is named "proto" so that
// the content type on the wire stays what callers and services expect.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*rawFrame).b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawFrame).b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
