package eventbus

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountBatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		nss  []string
		dups []bool
		want map[[2]string]float64 // namespace, duplicate
	}{
		{"empty", nil, nil, map[[2]string]float64{}},
		{"one run", []string{"a", "a", "a"}, []bool{false, false, false}, map[[2]string]float64{{"a", "false"}: 3}},
		{
			"mixed", []string{"a", "a", "b", "a", "a"}, []bool{false, true, false, false, false},
			map[[2]string]float64{{"a", "false"}: 3, {"a", "true"}: 1, {"b", "false"}: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics(prometheus.NewRegistry())
			acks := make([]pubAck, len(tc.dups))
			for i, d := range tc.dups {
				acks[i].dup = d
			}
			m.countBatch(tc.nss, acks)
			if n := testutil.CollectAndCount(m.published); n != len(tc.want) {
				t.Errorf("%d series; want %d", n, len(tc.want))
			}
			for labels, want := range tc.want {
				if got := testutil.ToFloat64(m.published.WithLabelValues(labels[0], labels[1])); got != want {
					t.Errorf("published{namespace=%q,duplicate=%q} = %v; want %v", labels[0], labels[1], got, want)
				}
			}
		})
	}
}

func TestCountAcksByNamespace(t *testing.T) {
	t.Parallel()
	tok := func(stream string) string { return "$JS.ACK." + stream + ".c.1.5.5.1700000000000000000.0" }
	domain := func(stream string) string {
		return "$JS.ACK.hub.ACCHASH." + stream + ".c.1.5.5.1700000000000000000.0.tok"
	}
	m := newMetrics(prometheus.NewRegistry())
	m.countAcks("ack", []string{tok("EVENTS_a"), tok("EVENTS_a"), domain("EVENTS_b"), tok("EVENTS_a"), tok("OTHER")})
	for labels, want := range map[[2]string]float64{{"a", "ack"}: 3, {"b", "ack"}: 1, {"", "ack"}: 1} {
		if got := testutil.ToFloat64(m.acks.WithLabelValues(labels[0], labels[1])); got != want {
			t.Errorf("acks{namespace=%q,kind=%q} = %v; want %v", labels[0], labels[1], got, want)
		}
	}
	for _, tk := range []string{tok("EVENTS_a"), domain("EVENTS_b")} {
		if err := checkAckToken(tk); err != nil {
			t.Errorf("test token %q is not a valid ack token: %v", tk, err)
		}
	}
}
