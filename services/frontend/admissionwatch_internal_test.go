package frontend

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// TestWatchCoreHeadProgress: the frontend's in-process router (watchCore)
// tells the queue of the changes of the core's load record (a decision, a
// request freed) and of the room a worker's head of queue makes as it
// computes on, though nothing in the record changes. One worker with the
// default timing model and a 1 s threshold, prompts of 32,000 tokens:
// behind a head just begun the next one is past the threshold, and fits
// once the head is far enough along (core.SaturationNext says when). The
// core's clock stands still but where the test moves it, so that each
// word the queue waits for can come from one cause only.
func TestWatchCoreHeadProgress(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1000, 0).UnixNano())
	cfg := core.DefaultConfig()
	cfg.Mode, cfg.QueueTTFTThreshold, cfg.Seed = core.ModeKV, time.Second, 1
	cfg.Clock = func() time.Time { return time.Unix(0, clock.Load()) }
	c := core.New(cfg)
	c.OnInstances([]registryclient.Change[*registryv1.Instance]{{Item: &registryv1.Instance{Namespace: "dynamo", Component: "backend",
		Endpoint: "generate", InstanceId: 1, Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}}})
	c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend",
		Endpoint: "generate", InstanceId: 1, ModelName: "m", BlockSize: 4}}})
	a := newAdmission(AdmissionConfig{}, newAdmissionMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { watchCore(ctx, c, a) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	route := func(id string, salt uint32) *routerv1.RouteResponse {
		t.Helper()
		prompt := make([]uint32, 32000)
		for i := range prompt {
			prompt[i] = uint32(i)*7 + salt
		}
		resp, err := c.Route(&routerv1.RouteRequest{RequestId: id, Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: "m"}}, TokenIds: prompt})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	word := func() (saturated bool, room uint32) {
		a.mu.Lock()
		defer a.mu.Unlock()
		mq := a.models["m"]
		if mq == nil {
			return false, 0
		}
		return mq.saturated, uint32(mq.room)
	}
	if r := route("a", 1); !r.Saturated {
		t.Fatalf("a head just begun leaves room for %d", r.Room)
	}
	testwait.Until(t, 20*time.Second, "the queue hears the decision saturated the fleet", func() bool {
		sat, _ := word()
		return sat
	})
	// When the core says the head's progress alone makes room, nothing
	// has changed in the record, but the next prompt fits.
	next := c.SaturationNext("m").Next
	if next <= 0 {
		t.Fatal("the core sees no room coming from the head's progress")
	}
	clock.Add(int64(next))
	testwait.Until(t, 20*time.Second, "the queue hears of the room the head made", func() bool {
		sat, room := word()
		return !sat && room == 1
	})
	// The next prompt takes that room.
	if r := route("b", 2); !r.Saturated {
		t.Fatalf("a second prompt behind the head leaves room for %d", r.Room)
	}
	testwait.Until(t, 20*time.Second, "the queue hears the fleet is saturated again", func() bool {
		sat, _ := word()
		return sat
	})
	c.Free("a")
	c.Free("b")
	testwait.Until(t, 20*time.Second, "the queue hears of the room the freed requests gave back", func() bool {
		sat, room := word()
		return !sat && room >= 1
	})
}
