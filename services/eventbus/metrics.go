package eventbus

import (
	"context"
	"strconv"
	"strings"
	"time"

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
	redelivered   *prometheus.CounterVec
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
			Help: "Acknowledgements passed to JetStream, by namespace and kind (ack or nak).",
		}, []string{"namespace", "kind"}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_eventbus_redelivered_events_total",
			Help: "Events sent to subscribers again (not acknowledged in time, or nak'ed), by namespace.",
		}, []string{"namespace"}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_eventbus_subscriptions",
			Help: "Subscriptions being served.",
		}),
		objectBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_eventbus_object_bytes_total",
			Help: "Object store bytes, by direction (put or get).",
		}, []string{"direction"}),
	}
	reg.MustRegister(m.published, m.delivered, m.acks, m.subscriptions, m.objectBytes, m.redelivered)
	return m
}

// countPublished counts n acknowledged events of namespace ns.
func (m *metrics) countPublished(ns string, duplicate bool, n int) {
	m.published.WithLabelValues(ns, strconv.FormatBool(duplicate)).Add(float64(n))
}

// countBatch counts a batch's acknowledged events, nss[i] being the
// namespace of acks[i], with one counter update per run of equal labels.
func (m *metrics) countBatch(nss []string, acks []pubAck) {
	(&publishedCounters{m: m}).countBatch(nss, acks)
}

// publishedCounters counts the acknowledged events of one publishing
// stream. It keeps the counters of the last namespace counted, so that a
// stream whose batches are all of one namespace (a worker's) looks its
// counters up by their labels once rather than at every batch.
type publishedCounters struct {
	m    *metrics
	ns   string
	dups [2]prometheus.Counter // of ns, not duplicate and duplicate; nil until used
}

// countBatch counts a batch's acknowledged events, nss[i] being the
// namespace of acks[i], with one counter update per run of equal labels.
func (p *publishedCounters) countBatch(nss []string, acks []pubAck) {
	start := 0
	for i := 1; i <= len(acks); i++ {
		if i < len(acks) && nss[i] == nss[start] && acks[i].dup == acks[start].dup {
			continue
		}
		p.add(nss[start], acks[start].dup, i-start)
		start = i
	}
}

// add counts n acknowledged events of namespace ns.
func (p *publishedCounters) add(ns string, duplicate bool, n int) {
	if ns != p.ns {
		p.ns, p.dups = ns, [2]prometheus.Counter{}
	}
	d := 0
	if duplicate {
		d = 1
	}
	if p.dups[d] == nil {
		p.dups[d] = p.m.published.WithLabelValues(ns, strconv.FormatBool(duplicate))
	}
	p.dups[d].Add(float64(n))
}

// countAcks counts acknowledgements by the namespace of the stream their
// token names ($JS.ACK.<stream>.… or, with a domain,
// $JS.ACK.<domain>.<account hash>.<stream>.…), one update per run of equal
// namespaces.
func (m *metrics) countAcks(kind string, tokens []string) {
	start := 0
	for i := 1; i <= len(tokens); i++ {
		if i < len(tokens) && ackNamespace(tokens[i]) == ackNamespace(tokens[start]) {
			continue
		}
		m.acks.WithLabelValues(ackNamespace(tokens[start]), kind).Add(float64(i - start))
		start = i
	}
}

// ackNamespace is the namespace of a checked ack token's stream, or "" when
// the stream is not an eventbus one.
func ackNamespace(token string) string {
	parts := strings.Split(token, ".")
	stream := ""
	switch {
	case len(parts) == 9:
		stream = parts[2]
	case len(parts) >= 12:
		stream = parts[4]
	}
	ns, _ := strings.CutPrefix(stream, "EVENTS_")
	if ns == stream {
		return ""
	}
	return ns
}

// lagCollector reports, at each scrape, how far the consumers of each
// namespace's stream are behind: the most events any consumer has still to
// be delivered, and the events delivered and not yet acknowledged.
type lagCollector struct {
	b                *bus
	pending, unacked *prometheus.Desc
}

func newLagCollector(b *bus) *lagCollector {
	return &lagCollector{b: b,
		pending: prometheus.NewDesc("switchyard_eventbus_consumer_lag_events",
			"Events stored and not yet delivered to the furthest-behind consumer of the namespace's stream.", []string{"namespace"}, nil),
		unacked: prometheus.NewDesc("switchyard_eventbus_consumer_ack_pending_events",
			"Events delivered to the namespace's consumers and not yet acknowledged.", []string{"namespace"}, nil),
	}
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.pending; ch <- c.unacked }

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.b.streams.Range(func(k, _ any) bool {
		ns := k.(string)
		st, err := c.b.js.Stream(ctx, StreamName(ns))
		if err != nil {
			return ctx.Err() == nil
		}
		var lag, unacked uint64
		for info := range st.ListConsumers(ctx).Info() {
			lag = max(lag, info.NumPending)
			unacked += uint64(info.NumAckPending)
		}
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(lag), ns)
		ch <- prometheus.MustNewConstMetric(c.unacked, prometheus.GaugeValue, float64(unacked), ns)
		return true
	})
}
