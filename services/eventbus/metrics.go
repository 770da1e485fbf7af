package eventbus

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the eventbus's own counters, next to the per-RPC ones that
// grpcserver records.
type metrics struct {
	published     *prometheus.CounterVec
	delivered     *prometheus.CounterVec
	acks          *prometheus.CounterVec
	subscriptions prometheus.Gauge
	objectBytes   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_eventbus_published_events_total",
			Help: "Events acknowledged by JetStream, by namespace and whether they were duplicates of an earlier msg id.",
		}, []string{"namespace", "duplicate"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_eventbus_delivered_events_total",
			Help: "Events sent to subscribers, by namespace.",
		}, []string{"namespace"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_eventbus_acks_total",
			Help: "Acknowledgements passed to JetStream, by kind (ack or nak).",
		}, []string{"kind"}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_eventbus_subscriptions",
			Help: "Subscriptions being served.",
		}),
		objectBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_eventbus_object_bytes_total",
			Help: "Object store bytes, by direction (put or get).",
		}, []string{"direction"}),
	}
	reg.MustRegister(m.published, m.delivered, m.acks, m.subscriptions, m.objectBytes)
	return m
}

// countPublished counts n acknowledged events of namespace ns.
func (m *metrics) countPublished(ns string, duplicate bool, n int) {
	d := "false"
	if duplicate {
		d = "true"
	}
	m.published.WithLabelValues(ns, d).Add(float64(n))
}

// countBatch counts a batch's acknowledged events, nss[i] being the
// namespace of acks[i], with one counter update per run of equal labels.
func (m *metrics) countBatch(nss []string, acks []pubAck) {
	start := 0
	for i := 1; i <= len(acks); i++ {
		if i < len(acks) && nss[i] == nss[start] && acks[i].dup == acks[start].dup {
			continue
		}
		m.countPublished(nss[start], acks[start].dup, i-start)
		start = i
	}
}
