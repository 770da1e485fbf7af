package transport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// A worker serves named endpoints on one or more request planes; a caller
// streams the responses back on the plane an address names. Here one
// server serves "words" on the tcp and http planes at once (as
// DYN_REQUEST_PLANE=tcp,http does), each answer a stream of payloads, and
// a handler's own error reaches the caller with its code.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cfg := transport.DefaultConfig()
	cfg.Planes = []transport.Plane{transport.PlaneTCP, transport.PlaneHTTP}
	cfg.TCP.Host, cfg.TCP.Port = "127.0.0.1", 0
	cfg.HTTP.Host, cfg.HTTP.Port = "127.0.0.1", 0
	srv, err := transport.NewServer(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	// words streams the request's words back, one response each.
	srv.Handle("words", func(ctx context.Context, req *transport.Request, w transport.ResponseWriter) error {
		if len(req.Payload) == 0 {
			return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: "empty request"}
		}
		for _, word := range bytes.Fields(req.Payload) {
			if err := w.Send(word); err != nil {
				return err
			}
		}
		return nil
	})
	if err := srv.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	c, err := transport.NewClient(transport.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	call := func(addr transport.Address, payload string) {
		st, err := c.Call(ctx, addr, "words", nil, []byte(payload))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer st.Close()
		var got []string
		for {
			b, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			var he *transport.HandlerError
			if errors.As(err, &he) {
				fmt.Printf("%s: error %s: %s\n", addr.Kind, he.Code, he.Message)
				return
			}
			if err != nil {
				fmt.Println(err)
				return
			}
			got = append(got, string(b))
		}
		fmt.Printf("%s: %q\n", addr.Kind, got)
	}
	// Addresses lists one address per plane, in the planes' order: what a
	// worker registers (transport.TransportOf).
	for _, addr := range srv.Addresses("words") {
		call(addr, "to the worker and back")
	}
	call(srv.Address("words"), "")
	// Output:
	// tcp: ["to" "the" "worker" "and" "back"]
	// http: ["to" "the" "worker" "and" "back"]
	// tcp: error invalid_argument: empty request
}
