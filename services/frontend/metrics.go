package frontend

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the frontend's Prometheus metrics, on a per-process registry.
type metrics struct {
	registry       *prometheus.Registry
	requests       *prometheus.CounterVec
	inflight       *prometheus.GaugeVec
	ttft           *prometheus.HistogramVec
	itl            *prometheus.HistogramVec
	migrations     *prometheus.CounterVec
	workerRequests *prometheus.CounterVec
	routerFallback prometheus.Counter
	fenced         prometheus.Counter
	promptTokens   *prometheus.CounterVec
	genTokens      *prometheus.CounterVec
	cachedTokens   *prometheus.CounterVec
	duration       *prometheus.HistogramVec

	// A label lookup hashes the values and takes the vector's lock; the
	// handles of each model and worker are looked up once and kept here.
	mu      sync.RWMutex
	models  map[string]*modelMetrics
	workers map[uint64]prometheus.Counter
}

// modelMetrics are the per-model handles a generation updates. The
// series that only some requests reach (time to first token, inter-token
// latency, token counts) are made where they were made before, at their
// first use, so /metrics shows the same series.
type modelMetrics struct {
	inflight                              prometheus.Gauge
	duration                              prometheus.Observer
	ttft, itl                             lazy[prometheus.Observer]
	promptTokens, genTokens, cachedTokens lazy[prometheus.Counter]
}

// labeled is a metric vector: a CounterVec, a HistogramVec.
type labeled[T any] interface{ WithLabelValues(...string) T }

// lazy is one model's series of vec, made at its first get.
type lazy[T any] struct {
	once  sync.Once
	vec   labeled[T]
	model string
	v     T
}

func (l *lazy[T]) get() T {
	l.once.Do(func() { l.v = l.vec.WithLabelValues(l.model) })
	return l.v
}

// model returns the handles of a model the registry knows (the caller
// checked: only those reach a generation, so the map stays bounded). It
// makes the model's inflight and duration series, as every generation did.
func (m *metrics) model(name string) *modelMetrics {
	m.mu.RLock()
	mm := m.models[name]
	m.mu.RUnlock()
	if mm != nil {
		return mm
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mm := m.models[name]; mm != nil {
		return mm
	}
	mm = &modelMetrics{inflight: m.inflight.WithLabelValues(name), duration: m.duration.WithLabelValues(name),
		ttft: lazy[prometheus.Observer]{vec: m.ttft, model: name}, itl: lazy[prometheus.Observer]{vec: m.itl, model: name},
		promptTokens: lazy[prometheus.Counter]{vec: m.promptTokens, model: name}, genTokens: lazy[prometheus.Counter]{vec: m.genTokens, model: name},
		cachedTokens: lazy[prometheus.Counter]{vec: m.cachedTokens, model: name}}
	if m.models == nil {
		m.models = map[string]*modelMetrics{}
	}
	m.models[name] = mm
	return mm
}

// unknownModel is the model label of requests for a model the registry
// does not know, so that what clients send cannot grow the label set.
const unknownModel = "unknown"

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &metrics{
		registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_requests_total",
			Help: "HTTP API requests by endpoint, model and status code.",
		}, []string{"endpoint", "model", "status"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_frontend_inflight_requests",
			Help: "Generation requests in flight, by model.",
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_frontend_time_to_first_token_seconds",
			Help:    "Time from a request's arrival to its first generated token.",
			Buckets: latency,
		}, []string{"model"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_frontend_inter_token_latency_seconds",
			Help:    "Time between consecutive generated tokens of a request.",
			Buckets: latency,
		}, []string{"model"}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_migrations_total",
			Help: "Requests moved to another worker after their worker failed, by model.",
		}, []string{"model"}),
		workerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_worker_requests_total",
			Help: "Request attempts sent to each worker instance (hex id). The label is not named instance, which Prometheus renames on scrape.",
		}, []string{"worker_instance"}),
		routerFallback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_frontend_router_fallback_total",
			Help: "Requests routed in process because the router service could not be reached.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_frontend_fenced_total",
			Help: "Times a worker the frontend could not reach was fenced out of routing (switchyard_frontend_fenced_instances: how many are out now).",
		}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_prompt_tokens_total",
			Help: "Prompt tokens of finished generation requests, by model.",
		}, []string{"model"}),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_generation_tokens_total",
			Help: "Generated tokens (reasoning and tool calls included), by model.",
		}, []string{"model"}),
		cachedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_cached_prompt_tokens_total",
			Help: "Prompt tokens the worker served from its prefix cache, by model.",
		}, []string{"model"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_frontend_request_duration_seconds",
			Help:    "End-to-end time of generation requests, from arrival to the last byte, by model.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"model"}),
	}
	reg.MustRegister(m.requests, m.inflight, m.ttft, m.itl, m.migrations, m.workerRequests, m.routerFallback, m.fenced,
		m.promptTokens, m.genTokens, m.cachedTokens, m.duration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) routed(instance uint64) {
	m.mu.RLock()
	c := m.workers[instance]
	m.mu.RUnlock()
	if c == nil {
		c = m.workerRequests.WithLabelValues(strconv.FormatUint(instance, 16))
		m.mu.Lock()
		if m.workers == nil {
			m.workers = map[uint64]prometheus.Counter{}
		}
		m.workers[instance] = c
		m.mu.Unlock()
	}
	c.Inc()
}

// forgetWorker drops the request counter series of a worker instance that
// left, so that a fleet whose workers come and go does not grow /metrics
// for good. A worker registered again starts a new series.
func (m *metrics) forgetWorker(instance uint64) {
	m.mu.Lock()
	delete(m.workers, instance)
	m.workerRequests.DeleteLabelValues(strconv.FormatUint(instance, 16))
	m.mu.Unlock()
}

// load counts this frontend's requests in flight per worker instance, for
// --max-inflight-per-worker.
type load struct {
	mu sync.Mutex
	n  map[uint64]int
}

func newLoad() *load { return &load{n: map[uint64]int{}} }

func (l *load) add(id uint64, d int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[id] += d; l.n[id] <= 0 {
		delete(l.n, id)
	}
}

// saturated reports whether every one of instances has at least limit
// requests in flight. No instances is not saturation (it is a 503).
func (l *load) saturated(instances []uint64, limit int) bool {
	if limit <= 0 || len(instances) == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range instances {
		if l.n[id] < limit {
			return false
		}
	}
	return true
}
