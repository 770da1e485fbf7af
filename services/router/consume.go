package router

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"time"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// consumer follows the eventbus for every namespace that has workers: KV
// events (replayed from the start of the stream, so a fresh router rebuilds
// its index from what the stream retains) and load reports (new ones only).
type consumer struct {
	bus    *eventbusclient.Client
	core   *core.Core
	log    *slog.Logger
	events bool
	// core, when set, follows KV events on NATS Core subjects and hands
	// them to the follower (core mode), which fills the gaps.
	coreKV *follower
	sync   *syncer // nil without --router-replica-sync
	// metrics observe each delivery's lag; nil-safe.
	metrics *routerMetrics
	// gaps fills gaps in the KV events of the stream from the workers
	// (jetstream mode); nil: gaps are counted only.
	gaps *gapFiller

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	seen   map[string]bool
	// start is where KV events resume per namespace (a snapshot's
	// sequences); seq is the last applied.
	start map[string]uint64
	seq   map[string]uint64
	wg    sync.WaitGroup

	// departed filters the KV events of workers the registry says are gone.
	departed *departed
}

func newConsumer(bus *eventbusclient.Client, dc *core.Core, log *slog.Logger, events bool) *consumer {
	ctx, cancel := context.WithCancel(context.Background())
	return &consumer{bus: bus, core: dc, log: log, events: events, ctx: ctx, cancel: cancel, seen: map[string]bool{},
		start: map[string]uint64{}, seq: map[string]uint64{}}
}

// follow starts consuming a namespace, once.
func (c *consumer) follow(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[ns] || c.ctx.Err() != nil {
		return
	}
	c.seen[ns] = true
	if c.events {
		req := &eventbusv1.SubscribeRequest{Namespace: ns, FilterSubject: wire.KVEventsFilter(ns), DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, AutoAck: true}
		if s := c.start[ns]; s > 0 {
			req.DeliverPolicy, req.StartSequence = eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE, s+1
		}
		c.runReq(req, func(ev *eventbusv1.DeliveredEvent) {
			b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
			if err != nil {
				c.log.Warn("undecodable KV event batch", "subject", ev.GetSubject(), "err", err.Error())
			} else {
				c.applyKV(ns, b)
			}
			c.mu.Lock()
			// An envelope's sequence counts once its last event is applied.
			c.seq[ns] = max(c.seq[ns], eventbusclient.Settled(ev))
			c.mu.Unlock()
		})
	}
	if c.coreKV != nil {
		c.runReq(&eventbusv1.SubscribeRequest{Namespace: ns, FilterSubject: wire.KVEventsFilter(ns), Core: true}, func(ev *eventbusv1.DeliveredEvent) {
			b, err := eventbusclient.Decode[workerv1.KvEventBatch](ev)
			if err != nil {
				c.log.Warn("undecodable KV event batch", "subject", ev.GetSubject(), "err", err.Error())
				return
			}
			c.coreKV.deliver(b)
		})
	}
	c.run(ns, wire.LoadFilter(ns), eventbusv1.DeliverPolicy_DELIVER_POLICY_NEW, func(ev *eventbusv1.DeliveredEvent) {
		m, err := eventbusclient.Decode[workerv1.LoadMetrics](ev)
		if err != nil {
			c.log.Warn("undecodable load report", "subject", ev.GetSubject(), "err", err.Error())
			return
		}
		c.core.ReportLoad(m)
	})
	if c.sync != nil {
		// From the start of the stream: a replica that joins late replays
		// every decision, and routed/freed pairs cancel out, leaving exactly
		// the requests still in flight.
		c.run(ns, wire.ReplicaSyncSubject(ns), eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, c.sync.apply)
		c.sync.mark(ns)
	}
	c.log.Info("following namespace on the eventbus", "namespace", ns, "kv_events", c.events, "core_kv_events", c.coreKV != nil, "replica_sync", c.sync != nil)
}

// applyKV applies a KV event batch of namespace ns from the stream, through
// the departed-worker filter when there is one.
func (c *consumer) applyKV(ns string, b *workerv1.KvEventBatch) {
	if c.gaps != nil {
		c.gaps.before(c.ctx, b)
	}
	if c.departed == nil {
		c.core.ApplyEvents(b)
		return
	}
	c.departed.apply(ns, b)
}

// filterDeparted makes the consumer drop the KV events of workers the
// registry does not list (see departed), asking it through listed.
func (c *consumer) filterDeparted(listed func(context.Context, string) (map[uint64]bool, error)) {
	c.departed = newDeparted(c.core, c.log, listed)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.departed.run(c.ctx)
	}()
}

// run subscribes (ephemeral, auto-ack) and applies events until close. The
// client resumes the subscription after eventbus or NATS restarts.
func (c *consumer) run(ns, filter string, policy eventbusv1.DeliverPolicy, apply func(*eventbusv1.DeliveredEvent)) {
	c.runReq(&eventbusv1.SubscribeRequest{Namespace: ns, FilterSubject: filter, DeliverPolicy: policy, AutoAck: true}, apply)
}

// sequences copies the last applied KV event sequence per namespace.
func (c *consumer) sequences() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.seq)
}

func (c *consumer) runReq(req *eventbusv1.SubscribeRequest, apply func(*eventbusv1.DeliveredEvent)) {
	filter := req.FilterSubject
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
		for c.ctx.Err() == nil {
			sub, err := c.bus.Subscribe(c.ctx, req)
			if err == nil {
				for {
					var ev *eventbusv1.DeliveredEvent
					ev, err = sub.Next(c.ctx)
					if err != nil {
						break
					}
					apply(ev)
					c.metrics.delivered(ev)
					bo.Reset()
				}
				_ = sub.Close()
			}
			if c.ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			wait := bo.Next()
			c.log.Warn("eventbus subscription failed; retrying", "filter", filter, "err", err.Error(), "backoff", wait.String())
			if backoff.Sleep(c.ctx, wait) != nil {
				return
			}
		}
	}()
}

// closeAll stops the subscriptions and then the replica syncer, which the
// subscriptions feed.
func (c *consumer) closeAll() {
	c.close()
	if c.sync != nil {
		c.sync.close()
	}
}

func (c *consumer) close() {
	c.mu.Lock()
	c.cancel()
	c.mu.Unlock()
	c.wg.Wait()
}
