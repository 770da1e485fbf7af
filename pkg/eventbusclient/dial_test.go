package eventbusclient_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

func TestMain(m *testing.M) { testleak.VerifyTestMain(m) }

// TestDialSkipsADeadReplica dials a dead address before a live eventbus, as
// one comma-separated string: a publish goes through and reads back.
func TestDialSkipsADeadReplica(t *testing.T) {
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, "127.0.0.1:1,"+svc.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject := "dialtest.worker.kv_events"
	resp, err := c.Publish(ctx, subject, wrapperspb.UInt64(7))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetSequence() == 0 {
		t.Fatalf("publish answered %v, want a stream sequence", resp)
	}
}
