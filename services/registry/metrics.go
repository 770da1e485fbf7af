package registry

import "github.com/prometheus/client_golang/prometheus"

// metrics are the registry's own series, beside the gRPC ones.
type metrics struct {
	watches    *prometheus.GaugeVec
	snapshots  *prometheus.CounterVec
	keepAlives *prometheus.CounterVec
	// backendErrors and leasesLost are counted by instrumentedBackend.
	backendErrors *prometheus.CounterVec
	leasesLost    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		watches: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "switchyard", Subsystem: "registry", Name: "watches_active",
			Help: "Open watch streams, by kind (instances, models, keys).",
		}, []string{"kind"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "registry", Name: "watch_snapshots_total",
			Help: "Snapshots sent on watch streams, by reason (initial, compacted).",
		}, []string{"reason"}),
		keepAlives: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "registry", Name: "keepalives_total",
			Help: "Lease refreshes, by result (ok, not_found, denied, error).",
		}, []string{"result"}),
	}
	// Every result is a series from the start, at zero: a rate over it
	// works before the first refresh (and the dashboard's panel has data).
	for _, r := range []string{"ok", "not_found", "denied", "error"} {
		m.keepAlives.WithLabelValues(r)
	}
	m.backendErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "registry", Name: "backend_errors_total",
		Help: "Failed backend (etcd or Kubernetes) calls, by operation and kind (timeout, unavailable, other).",
	}, []string{"op", "kind"})
	m.leasesLost = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "registry", Name: "leases_lost_total",
		Help: "Keep-alives for a lease that was already gone (expired or revoked): its worker must register again.",
	})
	reg.MustRegister(m.watches, m.snapshots, m.keepAlives, m.backendErrors, m.leasesLost)
	return m
}
