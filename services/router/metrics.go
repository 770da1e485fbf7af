package router

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// The router's domain metrics. They decorate what exists rather than
// sprinkle counters through the core (as llm-d-router's instrumented
// index): the state (per-worker load and blocks, event counters) is read
// from Core.Stats at each scrape, decisions are observed on the RPCs'
// answers by a decorating server, and event lag on the consumer's
// deliveries.

// routerMetrics are the series the router updates as things happen.
type routerMetrics struct {
	decisions   *prometheus.CounterVec
	cachedShare *prometheus.HistogramVec
	cost        *prometheus.HistogramVec
	eventLag    prometheus.Histogram
	replicaLag  prometheus.Histogram
	// snapshotAt is when the index was last stored to (or restored from)
	// the object store, in Unix nanoseconds; 0 before.
	snapshotAt atomic.Int64
}

// lagBuckets span a healthy sub-millisecond path to a stalled consumer.
var lagBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newRouterMetrics(reg prometheus.Registerer, c *core.Core) *routerMetrics {
	m := &routerMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_router_decisions_total",
			Help: "Routing decisions, by mode and model.",
		}, []string{"mode", "model"}),
		cachedShare: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_router_cached_share",
			Help:    "Share of each routed request's full blocks the chosen worker caches (0..1).",
			Buckets: []float64{0, .1, .2, .3, .4, .5, .6, .7, .8, .9, .95, 1},
		}, []string{"mode"}),
		cost: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_router_chosen_cost",
			Help:    "The chosen worker's predicted cost for each routed request, in the scheduler's units.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}, []string{"mode"}),
		eventLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_router_kv_event_lag_seconds",
			Help:    "Time from a KV event batch being stored in the eventbus to the router applying it.",
			Buckets: lagBuckets,
		}),
		replicaLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_router_replica_sync_lag_seconds",
			Help:    "Time from another router replica's decision being stored in the eventbus to this replica applying it.",
			Buckets: lagBuckets,
		}),
	}
	reg.MustRegister(m.decisions, m.cachedShare, m.cost, m.eventLag, m.replicaLag, &stateCollector{core: c, m: m})
	return m
}

// delivered observes one event the consumer applied: its lag, by kind.
func (m *routerMetrics) delivered(ev *eventbusv1.DeliveredEvent) {
	if m == nil || ev.GetTime() == nil {
		return
	}
	lag := time.Since(ev.GetTime().AsTime()).Seconds()
	switch name := wire.EventName(ev.GetSubject()); name {
	case wire.KVEventsName:
		m.eventLag.Observe(max(lag, 0))
	case wire.ReplicaSyncName:
		m.replicaLag.Observe(max(lag, 0))
	}
}

// snapshotted records that the index was stored or restored at t.
func (m *routerMetrics) snapshotted(t time.Time) {
	if m != nil {
		m.snapshotAt.Store(t.UnixNano())
	}
}

// modeLabel is the bounded mode label: the mode, or kv-approximate.
func modeLabel(c *core.Core) string {
	if c.Mode() == core.ModeKV && c.Approximate() {
		return "kv-approximate"
	}
	return string(c.Mode())
}

// stateCollector reads the core's state at each scrape. Its per-worker
// series exist only for live workers, so a departed worker's go with it.
type stateCollector struct {
	core *core.Core
	m    *routerMetrics
}

var (
	workerLabels    = []string{"instance"}
	descWorkerReqs  = prometheus.NewDesc("switchyard_router_worker_active_requests", "Requests routed to the worker and not yet freed.", workerLabels, nil)
	descWorkerPre   = prometheus.NewDesc("switchyard_router_worker_prefill_blocks", "Blocks the worker still has to prefill for requests routed to it.", workerLabels, nil)
	descWorkerDec   = prometheus.NewDesc("switchyard_router_worker_decode_blocks", "Blocks of the worker's routed requests in decode.", workerLabels, nil)
	descWorkerIdx   = prometheus.NewDesc("switchyard_router_worker_indexed_blocks", "Blocks the index says the worker caches.", workerLabels, nil)
	descBlocks      = prometheus.NewDesc("switchyard_router_indexed_blocks", "Distinct blocks in the KV index.", nil, nil)
	descEntries     = prometheus.NewDesc("switchyard_router_indexed_entries", "(block, worker) pairs in the KV index.", nil, nil)
	descApplied     = prometheus.NewDesc("switchyard_router_kv_events_applied_total", "KV events applied to the index.", nil, nil)
	descDuplicate   = prometheus.NewDesc("switchyard_router_kv_events_duplicate_total", "KV events dropped as duplicates or late (an id already applied).", nil, nil)
	descUnknownMed  = prometheus.NewDesc("switchyard_router_kv_events_unknown_medium_total", "KV events applied whose medium (cache tier) the router does not know: their blocks are kept on the unknown tier and priced as disk.", nil, nil)
	descUnknownSt   = prometheus.NewDesc("switchyard_router_kv_state_unknown_medium_blocks_total", "Blocks of workers' KV states (rebuilds) whose medium the router does not know.", nil, nil)
	descTierEntries = prometheus.NewDesc("switchyard_router_indexed_tier_entries", "(block, worker) pairs in the KV index held on a tier below GPU, by tier (cpu, disk, unknown).", []string{"tier"}, nil)
	descGap         = prometheus.NewDesc("switchyard_router_kv_events_gaps_total", "KV events applied after missing ones (a gap in a worker's event ids).", nil, nil)
	descSnapshotAge = prometheus.NewDesc("switchyard_router_snapshot_age_seconds", "Seconds since the index was last stored to or restored from the object store.", nil, nil)
	descWorkerAge   = prometheus.NewDesc("switchyard_router_worker_last_event_age_seconds", "Seconds since the router last received a KV event of the worker (absent before the first).", workerLabels, nil)
	descDisagg      = prometheus.NewDesc("switchyard_router_disagg_decisions_total", "Requests of models with prefill and decode workers routed, by where their prompt is computed: remote_prefill (a prefill worker, then the KV moves to the decode worker) or local_prefill (the worker that decodes).", []string{"decision"}, nil)
	descSessions    = prometheus.NewDesc("switchyard_router_session_bindings", "Live session bindings (x-session-id to worker), this replica's and its peers'.", nil, nil)
	descSessHits    = prometheus.NewDesc("switchyard_router_session_hits_total", "Requests of a bound session this replica routed to the bound worker.", nil, nil)
	descSessNew     = prometheus.NewDesc("switchyard_router_session_binds_total", "Requests of a session without a live binding this replica routed, binding it to the worker chosen.", nil, nil)
	descSessMoves   = prometheus.NewDesc("switchyard_router_session_moves_total", "Requests of a bound session this replica routed elsewhere, moving the binding, by reason: load (soft affinity: the bound worker was full, the other was not) or unavailable (the bound worker was excluded or does not serve the model).", []string{"reason"}, nil)
	descSessEnds    = prometheus.NewDesc("switchyard_router_session_ends_total", "Session bindings that ended, by reason: expired (idle past --session-ttl), evicted (past --session-max-bindings) or worker_gone (its worker left).", []string{"reason"}, nil)
	descLateness    = prometheus.NewDesc("switchyard_router_first_token_lateness_seconds", fmt.Sprintf("How much later than the router predicted its requests' first tokens come, per model: the %g quantile over its last %d requests routed within --queue-ttft-threshold, which saturation adds to the predictions on a worker with prompts queued (negative: earlier). Absent before the first.", scheduler.LateQuantile, scheduler.LateWindow), []string{"model"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWorkerReqs, descWorkerPre, descWorkerDec, descWorkerIdx, descBlocks, descEntries,
		descApplied, descDuplicate, descGap, descUnknownMed, descUnknownSt, descTierEntries, descSnapshotAge, descWorkerAge, descDisagg,
		descSessions, descSessHits, descSessNew, descSessMoves, descSessEnds, descLateness} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.core.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, w := range st.Workers {
		id := fmt.Sprintf("%x", w.InstanceId)
		if w.DpRank != 0 {
			id = fmt.Sprintf("%x-%d", w.InstanceId, w.DpRank)
		}
		gauge(descWorkerReqs, float64(w.Requests), id)
		gauge(descWorkerPre, float64(w.PrefillBlocks), id)
		gauge(descWorkerDec, float64(w.DecodeBlocks), id)
		gauge(descWorkerIdx, float64(w.CachedBlocks), id)
		if t := w.GetLastEventTime(); t != nil {
			gauge(descWorkerAge, time.Since(t.AsTime()).Seconds(), id)
		}
	}
	gauge(descBlocks, float64(st.IndexedBlocks))
	gauge(descEntries, float64(st.IndexedEntries))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(st.EventsApplied))
	ch <- prometheus.MustNewConstMetric(descDuplicate, prometheus.CounterValue, float64(st.EventsDuplicate))
	ch <- prometheus.MustNewConstMetric(descGap, prometheus.CounterValue, float64(st.EventsGap))
	unknownEvents, unknownBlocks := c.core.UnknownMedium()
	ch <- prometheus.MustNewConstMetric(descUnknownMed, prometheus.CounterValue, float64(unknownEvents))
	ch <- prometheus.MustNewConstMetric(descUnknownSt, prometheus.CounterValue, float64(unknownBlocks))
	for i, n := range c.core.TierEntries() {
		gauge(descTierEntries, float64(n), index.Tier(i+1).String())
	}
	remote, local := c.core.DisaggDecisions()
	ch <- prometheus.MustNewConstMetric(descDisagg, prometheus.CounterValue, float64(remote), core.DecisionRemotePrefill)
	ch <- prometheus.MustNewConstMetric(descDisagg, prometheus.CounterValue, float64(local), core.DecisionLocalPrefill)
	ss := c.core.Sessions()
	gauge(descSessions, float64(st.SessionBindings))
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descSessHits, ss.Outcomes[core.SessionHit])
	counter(descSessNew, ss.Outcomes[core.SessionNew])
	counter(descSessMoves, ss.Outcomes[core.SessionMovedLoad], "load")
	counter(descSessMoves, ss.Outcomes[core.SessionMovedUnavailable], "unavailable")
	for _, r := range []string{core.SessionExpired, core.SessionEvicted, core.SessionWorkerGone} {
		counter(descSessEnds, ss.Ended[r], r)
	}
	for _, model := range c.core.Models() {
		if ms, n := c.core.Lateness(model); n > 0 {
			gauge(descLateness, ms/1000, model)
		}
	}
	if at := c.m.snapshotAt.Load(); at > 0 {
		gauge(descSnapshotAge, time.Since(time.Unix(0, at)).Seconds())
	}
}

// meteredServer observes every decision Route answers.
type meteredServer struct {
	routerv1.RouterServiceServer
	m    *routerMetrics
	mode string
}

func meter(s routerv1.RouterServiceServer, m *routerMetrics, mode string) *meteredServer {
	return &meteredServer{RouterServiceServer: s, m: m, mode: mode}
}

func (s *meteredServer) Route(ctx context.Context, r *routerv1.RouteRequest) (*routerv1.RouteResponse, error) {
	// The server writes the chosen worker's cost here: a caller that
	// omits the candidates lets the decision price only those that can
	// win, so the cost is not read from a list.
	cost := math.NaN()
	resp, err := s.RouterServiceServer.Route(context.WithValue(ctx, chosenCostKey{}, &cost), r)
	if err != nil {
		return resp, err
	}
	model := r.GetTarget().GetModel()
	if model == "" {
		model = "(endpoint)"
	}
	s.m.decisions.WithLabelValues(s.mode, model).Inc()
	if n := resp.GetRequestBlocks(); n > 0 {
		s.m.cachedShare.WithLabelValues(s.mode).Observe(float64(resp.GetOverlapBlocks()) / float64(n))
	}
	if !math.IsNaN(cost) {
		s.m.cost.WithLabelValues(s.mode).Observe(cost)
	}
	return resp, nil
}
