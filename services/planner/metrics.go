package planner

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// metrics are the planner's series, per pool labelled model and role.
type metrics struct {
	decisions       prometheus.Counter
	lastID          prometheus.Gauge
	current, target *prometheus.GaugeVec
	observed        *prometheus.GaugeVec
	forecast        *prometheus.GaugeVec
	capacity        *prometheus.GaugeVec
	ttft, itl       *prometheus.GaugeVec
	changes         *prometheus.CounterVec
	drained         *prometheus.CounterVec
	connectorErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	pool := []string{"model", "role"}
	g := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, pool)
	}
	m := &metrics{
		decisions: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_planner_decisions_total", Help: "Decisions made."}),
		lastID:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_planner_last_decision_id", Help: "The id of the last decision."}),
		current:   g("switchyard_planner_current_replicas", "Workers of the pool at the last decision, registered and starting."),
		target:    g("switchyard_planner_target_replicas", "Workers the last decision wants in the pool."),
		observed:  g("switchyard_planner_demand_requests_per_second", "Requests per second the pool's workers received over the last interval."),
		forecast:  g("switchyard_planner_forecast_requests_per_second", "Requests per second forecast for the next interval."),
		capacity:  g("switchyard_planner_worker_capacity_requests_per_second", "Requests per second one worker holds within the objectives, from its timing model."),
		ttft:      g("switchyard_planner_predicted_ttft_ms", "The pool's lowest predicted time to first token of a mean request now, ms."),
		itl:       g("switchyard_planner_predicted_itl_ms", "The pool's lowest predicted inter-token latency now, ms."),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_planner_scale_changes_total",
			Help: "Decisions that changed the pool's size, by direction (up, down)."}, append(pool, "direction")),
		drained: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_planner_drained_workers_total",
			Help: "Workers chosen to drain and stop."}, pool),
		connectorErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_planner_connector_errors_total",
			Help: "Decisions the connector could not carry out in full."}),
	}
	reg.MustRegister(m.decisions, m.lastID, m.current, m.target, m.observed, m.forecast, m.capacity, m.ttft, m.itl, m.changes, m.drained, m.connectorErrors)
	return m
}

func (m *metrics) observe(d core.Decision) {
	m.decisions.Inc()
	m.lastID.Set(float64(d.ID))
	for _, p := range d.Pools {
		l := []string{p.Model, string(p.Role)}
		m.current.WithLabelValues(l...).Set(float64(p.Current))
		m.target.WithLabelValues(l...).Set(float64(p.Target))
		m.observed.WithLabelValues(l...).Set(p.Inputs.Observed.RequestsPerSec)
		m.forecast.WithLabelValues(l...).Set(p.Inputs.Forecast.RequestsPerSec)
		m.capacity.WithLabelValues(l...).Set(p.Inputs.CapacityRPS)
		m.ttft.WithLabelValues(l...).Set(p.Inputs.TTFTMs)
		m.itl.WithLabelValues(l...).Set(p.Inputs.ITLMs)
		switch {
		case p.Target > p.Current:
			m.changes.WithLabelValues(p.Model, string(p.Role), "up").Inc()
		case p.Target < p.Current:
			m.changes.WithLabelValues(p.Model, string(p.Role), "down").Inc()
		}
		if len(p.Drain) > 0 {
			m.drained.WithLabelValues(l...).Add(float64(len(p.Drain)))
		}
	}
}
