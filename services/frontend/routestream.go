package frontend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
)

// A request is routed on a RouteStream (router.proto) rather than by a
// unary Route call: the same decision, without a call's setup on both sides
// (a new HTTP/2 stream, headers and trailers, the server's interceptors),
// which was the largest part of the router round trip before the first
// token. A stream serves one request at a time: a request takes an idle
// stream (or opens one), sends, reads its answer and gives the stream back,
// so no answer waits behind another request's and no goroutine stands
// between a request and its answer. A router without RouteStream (an older
// one) gets unary calls.

// maxIdleRouteStreams bounds the streams kept between requests (one per
// request in flight at the peak); past it a returned stream is closed.
const maxIdleRouteStreams = 256

// routeStreams is the RouteStream pool of one router client.
type routeStreams struct {
	client routerv1.RouterServiceClient

	mu     sync.Mutex
	idle   []*routeStream
	closed bool
	// unary is set once the router answered Unimplemented.
	unary atomic.Bool
	// streamed counts the decisions answered on a stream (for tests).
	streamed atomic.Uint64
}

// routeStream is one open stream and the context that ends it.
type routeStream struct {
	stream routerv1.RouterService_RouteStreamClient
	cancel context.CancelFunc
}

func newRouteStreams(client routerv1.RouterServiceClient) *routeStreams {
	return &routeStreams{client: client}
}

// route decides req as Route would, on a stream when the router has them;
// ctx bounds the wait (its end breaks the stream, which is then dropped).
// A request whose trace is recorded is routed with a unary call, so that
// the router's Route spans join its trace (a stream's span is the stream's,
// not the request's).
func (p *routeStreams) route(ctx context.Context, req *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	if p.unary.Load() || trace.SpanFromContext(ctx).IsRecording() {
		return p.client.Route(ctx, req)
	}
	// An idle stream may have broken since its last use (a router replica
	// went away): a Send that fails delivered nothing, so the request is
	// sent again on another stream, at most a few times, then as a call.
	for range 3 {
		s, err := p.get()
		if err != nil {
			break
		}
		stop := context.AfterFunc(ctx, s.cancel)
		if err := s.stream.Send(&routerv1.RouteStreamRequest{Route: req}); err != nil {
			stop()
			err = s.closeErr(err)
			s.close()
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if status.Code(err) == codes.Unimplemented {
				p.unary.Store(true)
				break
			}
			continue
		}
		resp, err := s.stream.Recv()
		if !stop() {
			// ctx ended while waiting and cancelled the stream.
			s.close()
			return nil, context.Cause(ctx)
		}
		if err != nil {
			// The router may have decided; as with a unary call that
			// broke, the caller treats it as a router that did not answer.
			s.close()
			if status.Code(err) == codes.Unimplemented {
				p.unary.Store(true)
				return p.client.Route(ctx, req)
			}
			return nil, err
		}
		p.put(s)
		p.streamed.Add(1)
		if e := resp.GetError(); e != nil {
			return nil, apierr.New(codes.Code(e.GetCode()), e.GetReason(), e.GetMessage(), nil)
		}
		return resp.GetRoute(), nil
	}
	return p.client.Route(ctx, req)
}

// get takes an idle stream or opens one.
func (p *routeStreams) get() (*routeStream, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("router client closed")
	}
	if n := len(p.idle); n > 0 {
		s := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()
	// The stream outlives the request that opens it.
	ctx, cancel := context.WithCancel(context.Background())
	st, err := p.client.RouteStream(ctx)
	if err != nil {
		cancel()
		if status.Code(err) == codes.Unimplemented {
			p.unary.Store(true)
		}
		return nil, err
	}
	return &routeStream{stream: st, cancel: cancel}, nil
}

// put gives a stream back for the next request.
func (p *routeStreams) put(s *routeStream) {
	p.mu.Lock()
	if !p.closed && len(p.idle) < maxIdleRouteStreams {
		p.idle = append(p.idle, s)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	s.close()
}

// close ends every idle stream; streams in use end when given back.
func (p *routeStreams) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, s := range idle {
		s.close()
	}
}

func (s *routeStream) close() {
	_ = s.stream.CloseSend()
	s.cancel()
}

// closeErr is the status that ended a stream whose Send failed (Send says
// only that it broke; Recv says why).
func (s *routeStream) closeErr(sendErr error) error {
	if _, err := s.stream.Recv(); err != nil {
		return err
	}
	return sendErr
}
