package core

import (
	"math"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// TestBlockWaitRoute: the load reports' capacity and run reach the cost.
// Two workers of 1,200 blocks (block size 4) whose requests generate 100
// tokens on average (25 blocks); worker 1 caches a prompt of 4,000 tokens
// (1,000 blocks) that no running request holds, and runs two requests of
// 500 blocks each (1,000 blocks, 25 more of their output so far): the
// prompt's 1,000 blocks exceed its room by 825, which the ends of both
// running requests free, 1.5 mean runs on average (a run: 100 tokens at
// a decode step of the default model at no reported usage). Worker 2 is
// idle: no wait, and the request goes there though worker 1 saves its
// prefill. Without the run reported, no wait is predicted and the request
// stays with its cache. When a running request holds the prompt's first
// half (500 blocks), the request shares them and takes 500: 325 too many,
// which the first end frees, half a run on average.
func TestBlockWaitRoute(t *testing.T) {
	now := time.Unix(5000, 0)
	tm := timingmodel.Default()
	runMs := 100 * tm.DecodeMs(0)
	prompt := tokens(4000, 11)
	for _, tc := range []struct {
		name   string
		totals bool // the reports carry request and output totals
		prefix bool // the first running request is the prompt's first half
		wait   float64
		want   uint64
	}{
		{name: "run known", totals: true, wait: 1.5 * runMs, want: 2},
		{name: "run unknown", totals: false, wait: 0, want: 1},
		{name: "a running request holds half the prompt", totals: true, prefix: true, wait: 0.5 * runMs, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(t, Config{Mode: ModeKV, Clock: func() time.Time { return now }}, 2)
			stored(c, 1, 1, prompt)
			w1 := index.WorkerID{Instance: 1}
			for i, id := range []string{"r1", "r2"} {
				toks := tokens(2000, uint32(100+i))
				if tc.prefix && i == 0 {
					toks = prompt[:2000]
				}
				hs := kvhash.Hashes(toks, 4, nil)
				hashes := make([]uint64, len(hs))
				for j, b := range hs {
					hashes[j] = b.Sequence
				}
				c.ApplyReplica(RoutedEvent(id, w1, len(hashes), hashes), now)
				c.PrefillDone(id)
			}
			// Long after their arrival, which no longer counts in the
			// rate of requests to come (QueueWait).
			now = now.Add(10 * time.Minute)
			for id := uint64(1); id <= 2; id++ {
				m := &workerv1.LoadMetrics{InstanceId: id, TimingModel: tm.Proto(), KvBlocksTotal: 1200,
					Requests: []*workerv1.RequestLoad{}}
				if tc.totals {
					m.RequestsTotal, m.OutputTokensTotal = 10, 1000
				}
				c.ReportLoad(m)
			}
			d, err := c.evaluate(query{target: modelTarget(), tokens: prompt})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range d.scored {
				want := 0.0
				if s.Worker.Instance == 1 {
					want = tc.wait
				}
				if got := s.BlockWaitMs(&d.req); math.Abs(got-want) > 1e-6 {
					t.Errorf("worker %d: block wait %v ms, want %v", s.Worker.Instance, got, want)
				}
			}
			d.release()
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "new", Target: modelTarget(), TokenIds: prompt})
			if err != nil {
				t.Fatal(err)
			}
			if resp.InstanceId != tc.want {
				t.Errorf("routed to worker %d, want %d", resp.InstanceId, tc.want)
			}
		})
	}
}
