// Package workertest calls a worker's generate endpoint in tests the way the
// frontend does: the GenerateRequest marshalled, sent through a request-plane
// client with the request id in the headers, and every GenerateResponse of
// the stream read back. Tests of the SDK, the mocker, the adapter, the router
// and the examples use it instead of each writing the stream loop.
package workertest

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Generate sends req to the generate endpoint at addr and returns every
// response in order. The error is the call's or the stream's (a
// *transport.HandlerError when the worker answered with one), with the
// responses read before it; a response that does not decode ends the call
// with an error naming its position.
func Generate(ctx context.Context, c transport.Client, addr transport.Address, req *workerv1.GenerateRequest) ([]*workerv1.GenerateResponse, error) {
	payload, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	st, err := c.Call(ctx, addr, wire.GenerateEndpoint, transport.Headers{transport.HeaderRequestID: req.GetRequestId()}, payload)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []*workerv1.GenerateResponse
	for {
		b, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		r := &workerv1.GenerateResponse{}
		if err := proto.Unmarshal(b, r); err != nil {
			return out, fmt.Errorf("response %d of the stream: %w", len(out), err)
		}
		out = append(out, r)
	}
}

// Output is what a stream of responses generated: their tokens in order and
// the last finish reason one of them named (unspecified if none did).
func Output(rs []*workerv1.GenerateResponse) ([]uint32, workerv1.FinishReason) {
	var tokens []uint32
	var finish workerv1.FinishReason
	for _, r := range rs {
		tokens = append(tokens, r.GetTokenIds()...)
		if f := r.GetFinishReason(); f != workerv1.FinishReason_FINISH_REASON_UNSPECIFIED {
			finish = f
		}
	}
	return tokens, finish
}

// TCP is the address of an instance registered on the TCP request plane.
func TCP(in *registryv1.Instance) transport.Address {
	return transport.Address{Kind: transport.PlaneTCP, Addr: in.GetTransport().GetTcp()}
}
