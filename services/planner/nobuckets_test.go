package planner_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/planner"
)

// TestRegistryWithoutBuckets: a registry whose key-value buckets answer
// Unimplemented (its kubernetes backend) leaves the planner running without
// writing decisions, except with the virtual connector, which needs them
// for the acknowledgements: that is a startup error.
func TestRegistryWithoutBuckets(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	registryv1.RegisterRegistryServiceServer(srv, registryv1.UnimplementedRegistryServiceServer{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	for _, tc := range []struct {
		connector string
		fails     bool
	}{{"local", false}, {"virtual", true}} {
		var cfg planner.Config
		fs := flagSet(&cfg)
		if err := fs.Parse([]string{"--grpc-addr", "127.0.0.1:0", "--metrics-addr", "", "--status-addr", "",
			"--registry-addr", lis.Addr().String(), "--eventbus-addr", "127.0.0.1:1", "--connector", tc.connector}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		svc, err := planner.Start(ctx, cfg, slog.New(slog.DiscardHandler))
		if tc.fails {
			cancel()
			if err == nil || !strings.Contains(err.Error(), "buckets") {
				t.Fatalf("%s: Start = %v, want an error naming the buckets", tc.connector, err)
			}
			continue
		}
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", tc.connector, err)
		}
		cancel()
		if err := svc.Wait(); err != nil {
			t.Fatalf("%s: %v", tc.connector, err)
		}
	}
}
