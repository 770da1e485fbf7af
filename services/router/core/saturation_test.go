package core

import (
	"fmt"
	"math"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/scheduler"
)

// TestSaturation routes 4,000-token prompts to two workers with the default
// timing model (a prompt's first token as its client sees it, the engine's
// time and the request's 10.8 ms overhead: alone, about 84 ms; behind one
// prompt queued, the two in one step, 152 ms; behind two, 12,000 tokens in
// two steps, 225 ms)
// and the clock stopped,
// so that nothing of the queues drains but what is freed. The decision
// says saturated once one more prompt would be past the limit on both
// workers, and WatchSaturation's answer (Saturation) agrees, until the
// requests are freed.
func TestSaturation(t *testing.T) {
	stopped := time.Unix(1000, 0)
	tests := []struct {
		name   string
		cfg    Config
		routes int
		// want is the saturated field of each decision in turn; after
		// the last (three prompts on each worker), Saturation, for a
		// typical prompt (4,000 tokens), is want's last.
		want []bool
		// room is each decision's room (0 while not saturated: not
		// counted), then SaturationRoom's once every request is freed.
		room []uint32
	}{
		{"off", Config{}, 6, []bool{false, false, false, false, false, false}, []uint32{0, 0, 0, 0, 0, 0, 0}},
		// 200 ms: a second 4,000-token prompt on a worker (152 ms) fits,
		// a third (225 ms) does not; the second of each worker's is
		// routed when the other one already holds two.
		{"ttft threshold", Config{QueueTTFTThreshold: 200 * time.Millisecond}, 6, []bool{false, false, false, true, true, true}, []uint32{3, 2, 1, 0, 0, 0, 4}},
		// 5,000 tokens: full past one prompt queued on each worker.
		{"prefill budget", Config{QueuePrefillBudget: 5000}, 6, []bool{false, false, false, true, true, true}, []uint32{3, 2, 1, 0, 0, 0, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Mode, cfg.Clock = ModeKV, func() time.Time { return stopped }
			c := cluster(t, cfg, 2)
			var got []bool
			var room []uint32
			for i := range tt.routes {
				resp, err := c.Route(&routerv1.RouteRequest{RequestId: fmt.Sprint("r", i), Target: modelTarget(), TokenIds: tokens(4000, uint32(i+1)*1000)})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, resp.Saturated)
				room = append(room, resp.Room)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("saturated per decision = %v, want %v", got, tt.want)
			}
			last := tt.want[len(tt.want)-1]
			if sat := c.Saturation(model); sat != last {
				t.Fatalf("Saturation = %v, want %v", sat, last)
			}
			changed := c.Changed()
			for i := range tt.routes {
				c.Free(fmt.Sprint("r", i))
			}
			select {
			case <-changed:
			default:
				t.Fatal("Changed was not closed by a Free")
			}
			sat, free := c.SaturationRoom(model)
			if sat {
				t.Fatal("still saturated once every request is freed")
			}
			if room = append(room, uint32(free)); fmt.Sprint(room) != fmt.Sprint(tt.room) {
				t.Fatalf("room per decision, then freed = %v, want %v", room, tt.room)
			}
			if c.Saturation("no-such-model") {
				t.Fatal("an unknown model is saturated")
			}
		})
	}
}

func TestSaturationLimitsValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"negative threshold", Config{QueueTTFTThreshold: -time.Millisecond}},
		{"negative budget", Config{QueuePrefillBudget: -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.QueueTTFTThreshold, cfg.QueuePrefillBudget = tt.cfg.QueueTTFTThreshold, tt.cfg.QueuePrefillBudget
			if err := cfg.Validate(); err == nil {
				t.Fatal("Validate accepted it")
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestSaturationLateness: a request's first token, reported later (or
// earlier) than the decision predicted it, teaches the core how late its
// model's first tokens come, and saturation adds that to a busy worker's
// predictions: the room SaturationRoom and the next decision count
// follows. Two idle workers, 4,000-token prompts, a 200 ms threshold: on
// time, a worker holds two prompts within it (84 ms, then 152 with one
// queued; 225 with two is past it); 70 ms late, one (152 + 70 is past it);
// 60 ms early, three (225 - 60 is within it, 292 - 60 not). An idle
// worker takes one however late. A request predicted past the threshold,
// or a core without a TTFT threshold, keeps no prediction; nor does one
// predicted before its worker's first load report (with Default, not a
// model the worker published).
func TestSaturationLateness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	idle := scheduler.Candidate{Timing: timingmodel.Default()}
	predicted := timingmodel.Duration(idle.FirstTokenMs(0, 4000))
	tests := []struct {
		name string
		cfg  Config
		// silent: the workers send no load report.
		silent bool
		late   time.Duration
		// kept says a residual is kept; room is SaturationRoom's once
		// the request is freed, decision the next decision's room.
		kept           bool
		room, decision int
	}{
		{"on time", Config{QueueTTFTThreshold: 200 * time.Millisecond}, false, 0, true, 4, 3},
		{"late", Config{QueueTTFTThreshold: 200 * time.Millisecond}, false, 70 * time.Millisecond, true, 2, 1},
		{"later than the threshold: idle workers still take one", Config{QueueTTFTThreshold: 200 * time.Millisecond}, false, time.Second, true, 2, 1},
		{"early", Config{QueueTTFTThreshold: 200 * time.Millisecond}, false, -60 * time.Millisecond, true, 6, 5},
		// 50 ms: each worker idle, its first prompt (84 ms) past it.
		{"predicted past the threshold", Config{QueueTTFTThreshold: 50 * time.Millisecond}, false, time.Second, false, 0, 0},
		{"no TTFT threshold", Config{QueuePrefillBudget: 5000}, false, time.Second, false, 4, 3},
		{"before the workers' first load report", Config{QueueTTFTThreshold: 200 * time.Millisecond}, true, 50 * time.Millisecond, false, 4, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			cfg := tt.cfg
			cfg.Mode, cfg.Clock = ModeKV, func() time.Time { return now }
			c := cluster(t, cfg, 2)
			for id := uint64(1); id <= 2 && !tt.silent; id++ {
				// Idle, publishing no timing model: Default, as before.
				c.ReportLoad(&workerv1.LoadMetrics{InstanceId: id, Requests: []*workerv1.RequestLoad{}})
			}
			if _, err := c.Route(&routerv1.RouteRequest{RequestId: "r0", Target: modelTarget(), TokenIds: tokens(4000, 1000)}); err != nil {
				t.Fatal(err)
			}
			now = t0.Add(predicted + tt.late)
			c.PrefillDone("r0")
			c.Free("r0")
			c.mu.Lock()
			l, late := c.late[model], c.lateMsLocked(model)
			c.mu.Unlock()
			if kept := l != nil && l.Len() == 1; kept != tt.kept {
				t.Fatalf("residual kept: %v, want %v", kept, tt.kept)
			}
			if want := float64(tt.late) / float64(time.Millisecond); tt.kept && math.Abs(late-want) > 1e-6 {
				t.Fatalf("lateness %v ms, want %v", late, want)
			}
			if _, room := c.SaturationRoom(model); room != tt.room {
				t.Fatalf("SaturationRoom: room %d, want %d", room, tt.room)
			}
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "r1", Target: modelTarget(), TokenIds: tokens(4000, 2000)})
			if err != nil {
				t.Fatal(err)
			}
			if int(resp.Room) != tt.decision {
				t.Fatalf("the next decision's room %d, want %d", resp.Room, tt.decision)
			}
		})
	}
}

// TestBacklogLeavesEarliest: a backlog's request goes to the worker where
// it fits within the TTFT threshold and the next request would be
// predicted latest, leaving the earliest slot to others. Two workers with
// the default timing model and the clock stopped; one 4,000-token prompt
// routed first: its worker predicts the next prompt at 157 ms (behind it),
// the idle one at 84 ms. The first prompt is the model's typical request
// (the room a frontend lets a backlog's request go on is counted in
// them): a backlog's prompt of 4,400 tokens is predicted at 165 ms behind
// it, past a 160 ms threshold where a typical one is within.
func TestBacklogLeavesEarliest(t *testing.T) {
	stopped := time.Unix(1000, 0)
	tests := []struct {
		name    string
		cfg     Config
		backlog bool
		session string
		// tokens is the backlog's prompt (0: 4,000 tokens).
		tokens int
		// behind says the request goes to the first one's worker.
		behind bool
	}{
		{"not a backlog: the cheapest, the idle worker", Config{QueueTTFTThreshold: 200 * time.Millisecond}, false, "", 0, false},
		{"a backlog: behind the first prompt, within 200 ms", Config{QueueTTFTThreshold: 200 * time.Millisecond}, true, "", 0, true},
		{"a backlog past the threshold there (130 ms): the idle worker", Config{QueueTTFTThreshold: 130 * time.Millisecond}, true, "", 0, false},
		{"a backlog longer than the typical: behind the first prompt, where a typical one is within 160 ms", Config{QueueTTFTThreshold: 160 * time.Millisecond}, true, "", 4400, true},
		{"a backlog that fits nowhere (50 ms): the cheapest", Config{QueueTTFTThreshold: 50 * time.Millisecond}, true, "", 0, false},
		{"a backlog without a TTFT threshold: the cheapest", Config{QueuePrefillBudget: 10000}, true, "", 0, false},
		{"a backlog of a session: the cheapest", Config{QueueTTFTThreshold: 200 * time.Millisecond}, true, "s1", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Mode, cfg.Clock = ModeKV, func() time.Time { return stopped }
			c := cluster(t, cfg, 2)
			first, err := c.Route(&routerv1.RouteRequest{RequestId: "r0", Target: modelTarget(), TokenIds: tokens(4000, 1000)})
			if err != nil {
				t.Fatal(err)
			}
			n := 4000
			if tt.tokens > 0 {
				n = tt.tokens
			}
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "r1", Target: modelTarget(), TokenIds: tokens(n, 2000),
				Backlog: tt.backlog, SessionId: tt.session})
			if err != nil {
				t.Fatal(err)
			}
			if behind := resp.InstanceId == first.InstanceId; behind != tt.behind {
				t.Fatalf("went behind the first prompt: %v, want %v", behind, tt.behind)
			}
		})
	}
}

// TestWithinLimitKeepsWithin: a request let go into room held back for it
// (RouteRequest.within_limit) goes to the cheapest worker where it fits
// within the TTFT threshold when the cost's choice is past it. Two
// workers with the default timing model and the clock stopped: worker 1
// caches the whole 4,000-token prompt but has two such prompts queued
// (the cost's choice, its first token predicted at about 140 ms), worker
// 2 is idle and caches none of it (about 73 ms).
func TestWithinLimitKeepsWithin(t *testing.T) {
	stopped := time.Unix(1000, 0)
	const cached, idle = 1, 2
	tests := []struct {
		name        string
		cfg         Config
		withinLimit bool
		session     string
		want        uint64
	}{
		{"not flagged: the cheapest, past the threshold", Config{QueueTTFTThreshold: 120 * time.Millisecond}, false, "", cached},
		{"flagged: the idle worker, within 120 ms", Config{QueueTTFTThreshold: 120 * time.Millisecond}, true, "", idle},
		{"flagged, the cheapest within 200 ms: the cheapest", Config{QueueTTFTThreshold: 200 * time.Millisecond}, true, "", cached},
		{"flagged, fits nowhere (50 ms): the cheapest", Config{QueueTTFTThreshold: 50 * time.Millisecond}, true, "", cached},
		{"flagged, no TTFT threshold: the cheapest", Config{QueuePrefillBudget: 100000}, true, "", cached},
		{"flagged, of a session: the cheapest", Config{QueueTTFTThreshold: 120 * time.Millisecond}, true, "s1", cached},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Mode, cfg.Clock = ModeKV, func() time.Time { return stopped }
			c := cluster(t, cfg, 2)
			for i, id := range []string{"q1", "q2"} {
				if _, err := c.Route(&routerv1.RouteRequest{RequestId: id, Target: modelTarget(), TokenIds: tokens(4000, uint32(1000+i*50000)),
					ExcludeInstanceIds: []uint64{idle}}); err != nil {
					t.Fatal(err)
				}
			}
			prompt := tokens(4000, 9000)
			stored(c, cached, 1, prompt)
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), TokenIds: prompt,
				WithinLimit: tt.withinLimit, SessionId: tt.session})
			if err != nil {
				t.Fatal(err)
			}
			if resp.InstanceId != tt.want {
				t.Fatalf("routed to worker %d, want %d", resp.InstanceId, tt.want)
			}
		})
	}
}

// TestDecisionRoomInTypicalRequests: a decision counts its room in the
// model's typical requests, as the watch does, whatever its own length:
// after 4,000-token prompts (TestSaturation's: at 200 ms a worker holds
// two), a short prompt's decision says the room the watch then says, not
// the many more short prompts that would fit.
func TestDecisionRoomInTypicalRequests(t *testing.T) {
	stopped := time.Unix(1000, 0)
	c := cluster(t, Config{Mode: ModeKV, Clock: func() time.Time { return stopped }, QueueTTFTThreshold: 200 * time.Millisecond}, 2)
	tests := []struct {
		name   string
		tokens int
	}{
		{"a typical prompt", 4000},
		{"a short prompt", 200},
		{"another short prompt", 200},
		{"a long prompt", 6000},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Route(&routerv1.RouteRequest{RequestId: fmt.Sprint("r", i), Target: modelTarget(), TokenIds: tokens(tt.tokens, uint32(i+1)*10_000)})
			if err != nil {
				t.Fatal(err)
			}
			sat, room := c.SaturationRoom(model)
			t.Logf("decision room %d saturated %v; watch %d %v", resp.Room, resp.Saturated, room, sat)
			if int(resp.Room) != room || resp.Saturated != sat {
				t.Fatalf("the decision says room %d (saturated %v), the watch %d (%v)", resp.Room, resp.Saturated, room, sat)
			}
		})
	}
}
