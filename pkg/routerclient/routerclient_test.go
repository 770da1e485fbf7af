package routerclient_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/routerclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

func TestMain(m *testing.M) { testleak.VerifyTestMain(m) }

// TestDialSkipsADeadReplica dials a dead address before a live router, as
// one comma-separated string: the call reaches the live one.
func TestDialSkipsADeadReplica(t *testing.T) {
	_, reg := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	svc, err := router.Start(rctx, routertest.Config(reg.Addr, ""), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		if err := svc.Wait(); err != nil {
			t.Error(err)
		}
	}()
	if err := routertest.WaitReady(rctx, svc); err != nil {
		t.Fatal(err)
	}
	c, err := routerclient.Dial([]string{"127.0.0.1:1," + svc.Addr().String()}, routerclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.GetStats(ctx, &routerv1.GetStatsRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if st.GetMode() != "kv" {
		t.Fatalf("mode %q, want kv", st.GetMode())
	}
}
