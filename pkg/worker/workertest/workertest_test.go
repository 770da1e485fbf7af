package workertest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGenerate serves generate on a real TCP request plane with a handler
// that answers by the request: one response per prompt token, a worker
// error, or a payload that is not a GenerateResponse.
func TestGenerate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := transport.DefaultConfig()
	cfg.Planes = []transport.Plane{transport.PlaneTCP}
	cfg.TCP.Host, cfg.TCP.Port = "127.0.0.1", 0
	srv, err := transport.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(wire.GenerateEndpoint, func(ctx context.Context, r *transport.Request, w transport.ResponseWriter) error {
		var req workerv1.GenerateRequest
		if err := proto.Unmarshal(r.Payload, &req); err != nil {
			return err
		}
		if got := r.Headers[transport.HeaderRequestID]; got != req.RequestId {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "request id header " + got}
		}
		switch req.RequestId {
		case "fails":
			return &transport.HandlerError{Code: transport.CodeEngineError, Message: "engine gone"}
		case "garbled":
			return w.Send([]byte{0xff, 0xff, 0xff})
		}
		for i, tok := range req.TokenIds {
			resp := &workerv1.GenerateResponse{TokenIds: []uint32{tok}}
			if i == len(req.TokenIds)-1 {
				resp.FinishReason = workerv1.FinishReason_FINISH_REASON_LENGTH
			}
			b, _ := proto.Marshal(resp)
			if err := w.Send(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := srv.Address(wire.GenerateEndpoint)

	for _, tt := range []struct {
		id         string
		prompt     []uint32
		wantTokens []uint32
		wantFinish workerv1.FinishReason
		wantErr    string
	}{
		{"three", []uint32{7, 8, 9}, []uint32{7, 8, 9}, workerv1.FinishReason_FINISH_REASON_LENGTH, ""},
		{"none", nil, nil, workerv1.FinishReason_FINISH_REASON_UNSPECIFIED, ""},
		{"fails", []uint32{1}, nil, workerv1.FinishReason_FINISH_REASON_UNSPECIFIED, "engine gone"},
		{"garbled", []uint32{1}, nil, workerv1.FinishReason_FINISH_REASON_UNSPECIFIED, "response 0 of the stream"},
	} {
		t.Run(tt.id, func(t *testing.T) {
			rs, err := workertest.Generate(ctx, c, addr, &workerv1.GenerateRequest{RequestId: tt.id, TokenIds: tt.prompt})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			var he *transport.HandlerError
			if tt.id == "fails" && (!errors.As(err, &he) || he.Code != transport.CodeEngineError) {
				t.Errorf("error %v, want the worker's HandlerError", err)
			}
			tokens, finish := workertest.Output(rs)
			if !slices.Equal(tokens, tt.wantTokens) || finish != tt.wantFinish {
				t.Errorf("output %v %v, want %v %v", tokens, finish, tt.wantTokens, tt.wantFinish)
			}
		})
	}
}

// TestTCP reads an instance's TCP request-plane address; an instance
// without one gives an empty address, which a call refuses.
func TestTCP(t *testing.T) {
	for _, tt := range []struct {
		in   *registryv1.Instance
		want string
	}{
		{&registryv1.Instance{Transport: &commonv1.Transport{Tcp: "127.0.0.1:7000"}}, "127.0.0.1:7000"},
		{&registryv1.Instance{}, ""},
		{nil, ""},
	} {
		if got := workertest.TCP(tt.in); got.Kind != transport.PlaneTCP || got.Addr != tt.want {
			t.Errorf("TCP(%v) = %+v, want tcp %q", tt.in, got, tt.want)
		}
	}
}
