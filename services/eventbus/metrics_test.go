package eventbus

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountBatch(t *testing.T) {
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
