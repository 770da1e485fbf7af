package core

import (
	"fmt"
	"testing"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
)

// TestSaturation routes 4,000-token prompts to two workers with the default
// timing model (one step of 4,000 prompt tokens: about 84 ms; of 8,000:
// about 165 ms; a prompt's first token behind one prompt queued: that
// one's 84 ms, then its own 84; behind two: the head's 84 ms, then the
// second's and its own in one step, 165) and the clock stopped,
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
		// 200 ms: a second 4,000-token prompt on a worker (168 ms) fits,
		// a third (249 ms) does not; the second of each worker's is
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
