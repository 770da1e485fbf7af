package router_test

import (
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// TestLoadHeartbeatWithinReportTTL: a worker whose load does not change
// publishes it every worker.DefaultLoadHeartbeat, and the router counts a
// report for scheduler.ReportTTL; at most half of it, so that one report
// lost or late does not let the worker's load lapse.
func TestLoadHeartbeatWithinReportTTL(t *testing.T) {
	if 2*worker.DefaultLoadHeartbeat > scheduler.ReportTTL {
		t.Fatalf("worker.DefaultLoadHeartbeat %v is over half the router's report freshness %v", worker.DefaultLoadHeartbeat, scheduler.ReportTTL)
	}
}
