package router

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// EventbusHealthService is the gRPC health service name under which the
// router tells whether it reaches the eventbus (and the eventbus its NATS):
// a health check of this service answers SERVING while it does and
// NOT_SERVING while it does not. The router's own health ("" and
// RouterService) does not follow it: cut from the eventbus, the router
// keeps routing on the index it has, which only goes stale (no new KV
// events or load reports) until the eventbus is back and the subscriptions
// resume where they stopped.
const EventbusHealthService = "switchyard.router.v1.RouterService/eventbus"

// busWatchInterval is how often the router asks the eventbus's health; a
// question unanswered within it fails.
const busWatchInterval = time.Second

// busWatchFailures is how many questions in a row must fail before the
// eventbus counts as unreachable, so that one answer late on a starved
// machine is not reported as an outage.
const busWatchFailures = 2

// busWatch follows whether the eventbus answers its health SERVING and
// reports it as the EventbusHealthService status, a gauge and a log line.
type busWatch struct {
	health    func(context.Context) error
	setStatus func(serving bool)
	log       *slog.Logger
	interval  time.Duration // busWatchInterval; shorter in tests

	reachable atomic.Bool
	// downSince is when the current outage began, Unix nanoseconds; 0
	// while reachable.
	downSince atomic.Int64

	outages prometheus.Counter
}

func newBusWatch(reg prometheus.Registerer, health func(context.Context) error, setStatus func(bool), log *slog.Logger) *busWatch {
	w := &busWatch{health: health, setStatus: setStatus, log: log, interval: busWatchInterval}
	reachable := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_router_eventbus_reachable",
		Help: "1 while the router reaches the eventbus and the eventbus answers its health SERVING (it reaches NATS), else 0; at 0 the router routes on an index that no KV events or load reports update.",
	}, func() float64 {
		if w.reachable.Load() {
			return 1
		}
		return 0
	})
	w.outages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_router_eventbus_unreachable_total",
		Help: "Times the eventbus became unreachable to the router (or stopped answering SERVING).",
	})
	reg.MustRegister(reachable, w.outages)
	// Unknown until the first answer: not reachable yet.
	setStatus(false)
	return w
}

// run asks every interval until ctx ends.
func (w *busWatch) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	failed := 0    // questions failed in a row
	known := false // whether reachable has been decided once
	for {
		qctx, cancel := context.WithTimeout(ctx, w.interval)
		err := w.health(qctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			failed = 0
			if !known || !w.reachable.Load() {
				w.reachable.Store(true)
				w.setStatus(true)
				if since := w.downSince.Swap(0); since != 0 {
					w.log.Info("eventbus reachable again; KV events and load reports resume",
						"unreachable_for", time.Since(time.Unix(0, since)).Round(time.Millisecond).String())
				}
			}
			known = true
		default:
			failed++
			if failed >= busWatchFailures && (!known || w.reachable.Load()) {
				w.reachable.Store(false)
				w.setStatus(false)
				w.downSince.Store(time.Now().UnixNano())
				w.outages.Inc()
				w.log.Warn("eventbus unreachable; routing on the index as it is (no KV events or load reports) until it is back", "err", err.Error())
				known = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
