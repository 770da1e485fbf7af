package router_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

// TestReportStream: batches of prefill completions and frees on one Report
// stream leave the router's load exactly as the unary calls do, in order,
// and a batch with an invalid id changes nothing and ends the stream.
func TestReportStream(t *testing.T) {
	_, reg := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rpc, _ := routertest.Start(t, ctx, routertest.Config(reg.Addr, ""))
	dc, err := registryclient.Dial([]string{reg.Addr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	sess, err := registryclient.NewSession(ctx, dc, registryclient.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	in := &registryv1.Instance{Namespace: "dynamo", Component: "backend", Endpoint: "generate", Transport: &commonv1.Transport{Tcp: "127.0.0.1:9999"}}
	if _, err := sess.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", ModelName: "m", BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	route := func(id string) {
		t.Helper()
		req := &routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "m"}}, TokenIds: []uint32{1, 2, 3, 4, 5, 6, 7, 8}}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := rpc.Route(ctx, req); err == nil {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("Route %s: %v", id, err)
			}
		}
	}
	load := func() (requests, prefill, decode uint32) {
		t.Helper()
		st, err := rpc.GetStats(ctx, &routerv1.GetStatsRequest{})
		if err != nil || len(st.Workers) != 1 {
			t.Fatalf("GetStats = %v, %v", st, err)
		}
		w := st.Workers[0]
		return w.Requests, w.PrefillBlocks, w.DecodeBlocks
	}
	for _, id := range []string{"r1", "r2", "r3"} {
		route(id)
	}
	stream, err := rpc.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*routerv1.ReportRequest{
		{PrefillComplete: []string{"r1"}},
		// r2's first token and r1's end; r9 is unknown (another replica's).
		{PrefillComplete: []string{"r2", "r9"}, Free: []string{"r1"}},
		// Both in one batch: prefill first, then free.
		{PrefillComplete: []string{"r3"}, Free: []string{"r3"}},
	} {
		if err := stream.Send(b); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil || resp.Batches != 3 {
		t.Fatalf("CloseAndRecv = %v, %v; want 3 batches", resp, err)
	}
	// Left: r2, in decode (2 blocks of 4 tokens).
	if r, p, d := load(); r != 1 || p != 0 || d != 2 {
		t.Fatalf("load after the reports: %d requests, %d prefill and %d decode blocks; want 1, 0, 2", r, p, d)
	}

	// A batch with an empty id is refused whole.
	route("r4")
	stream, err = rpc.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&routerv1.ReportRequest{Free: []string{"r2", ""}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch with an empty id: %v, want InvalidArgument", err)
	}
	if r, _, _ := load(); r != 2 {
		t.Fatalf("%d requests after a refused batch, want 2 (r2, r4)", r)
	}
}
