package eventbus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

// TestPublishDuringNATSRestart publishes while the nats-server is down, with
// a small --nats-reconnect-buffer. Health says NOT_SERVING meanwhile. A
// publish that fits in the buffer gets no acknowledgement while NATS is away
// (its outcome is unknown to the caller, who publishes it again later with
// the same msg id); a publish past the buffer fails at once with an error
// naming the buffer. After the restart every event of the first kind is in
// the stream exactly once and none of the second kind is: nothing was
// silently dropped or stored twice.
func TestPublishDuringNATSRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	store := t.TempDir()
	ns := eventbustest.StartNATSAt(t, -1, store)
	url := ns.ClientURL()
	port := portOf(t, url)
	cfg := eventbustest.Config(url)
	cfg.NATSMaxReconnects, cfg.NATSReconnectWait, cfg.NATSReconnectBuffer = -1, 50*time.Millisecond, 32<<10
	svc := eventbustest.StartEventbus(t, cfg)
	cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	raw := eventbusv1.NewEventBusServiceClient(cc)
	health := healthpb.NewHealthClient(cc)
	waitHealth := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for {
			r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: eventbusv1.EventBusService_ServiceDesc.ServiceName})
			if err == nil && r.Status == want {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("health never became %v", want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	payload := []byte(strings.Repeat("x", 4<<10))
	event := func(i int) *eventbusv1.Event {
		return &eventbusv1.Event{Subject: "restart.backend.kv_cache_update", Payload: payload, MsgId: fmt.Sprintf("ev-%d", i)}
	}
	// The stream exists before NATS goes away.
	if _, err := raw.Publish(ctx, &eventbusv1.PublishRequest{Event: event(0)}); err != nil {
		t.Fatal(err)
	}
	waitHealth(healthpb.HealthCheckResponse_SERVING)

	eventbustest.StopNATS(ns)
	waitHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	var unknown, rejected []int
	for i := 1; len(rejected) < 3; i++ {
		if i > 100 {
			t.Fatalf("100 publishes of 4 KiB never filled a 32 KiB reconnect buffer (%d unknown)", len(unknown))
		}
		// Until the buffer is full a publish waits for an acknowledgement that
		// cannot come, so it gets a short deadline; once it is full the refusal
		// is immediate, and a generous deadline keeps a loaded machine from
		// turning a slow refusal into a false failure.
		wait := 100 * time.Millisecond
		if len(rejected) > 0 {
			wait = 10 * time.Second
		}
		pctx, pcancel := context.WithTimeout(ctx, wait)
		_, err := raw.Publish(pctx, &eventbusv1.PublishRequest{Event: event(i)})
		pcancel()
		switch {
		case err == nil:
			t.Fatalf("publish %d acknowledged while NATS is down", i)
		case apierr.Reason(err) == apierr.ReasonReconnectBufferFull:
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "--nats-reconnect-buffer") {
				t.Fatalf("buffer full = %v, want Unavailable naming --nats-reconnect-buffer", err)
			}
			rejected = append(rejected, i)
		case len(rejected) > 0:
			t.Fatalf("publish %d after a full buffer = %v, want the buffer error again", i, err)
		default:
			unknown = append(unknown, i)
		}
	}
	if len(unknown) == 0 {
		t.Fatal("no publish fitted in the reconnect buffer")
	}

	eventbustest.StartNATSAt(t, port, store)
	waitHealth(healthpb.HealthCheckResponse_SERVING)
	// The caller publishes the unknown ones again; msg ids keep them single.
	client := eventbustest.Client(t, svc.Addr().String())
	for _, i := range unknown {
		if _, err := client.PublishEvent(ctx, event(i)); err != nil {
			t.Fatalf("publish %d again: %v", i, err)
		}
	}
	js := directJetStream(t, url)
	st, err := js.Stream(ctx, eventbus.StreamName("restart"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		seen[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	for _, i := range append([]int{0}, unknown...) {
		if n := seen[fmt.Sprintf("ev-%d", i)]; n != 1 {
			t.Errorf("event %d stored %d times, want once", i, n)
		}
	}
	for _, i := range rejected {
		if n := seen[fmt.Sprintf("ev-%d", i)]; n != 0 {
			t.Errorf("event %d was refused with the buffer error but stored %d times", i, n)
		}
	}
	if len(seen) != 1+len(unknown) {
		t.Errorf("stream holds %d distinct events, want %d", len(seen), 1+len(unknown))
	}
	t.Logf("NATS restart: %d publishes buffered and stored once, %d refused naming the buffer", len(unknown), len(rejected))
}
