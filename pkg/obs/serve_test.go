package obs_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/pkg/obs"
)

// TestServeMetrics: /metrics serves the given collectors beside the Go and
// process ones, and with no address nothing is served (and stop is still
// safe to call). The port is not bound again after stop: another test
// process could take it in between.
func TestServeMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_test_gauge", Help: "A test gauge."})
	g.Set(7)
	stop, addr, err := obs.ServeMetrics(ctx, "127.0.0.1:0", "", log, g)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"switchyard_test_gauge 7", "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	stop()

	stop, addr, err = obs.ServeMetrics(ctx, "", "", log, g)
	if err != nil || addr != nil {
		t.Fatalf("no addresses: addr %v, err %v; want nothing served", addr, err)
	}
	stop()
}
