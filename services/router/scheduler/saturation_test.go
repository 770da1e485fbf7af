package scheduler

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// TestFirstToken: a request's predicted first token is the time left of
// the head's computation, then one span of what waits behind the head and
// its own prompt. The model costs a prompt token 1 ms and a prefill batch
// 50 ms (a step of 1000 tokens), so a step's fixed cost shows. With 20 ms
// of the 50 each request's own overhead, each step pays 30 and the first
// token comes 20 ms after the engine's (RequestEngineFirstTokenMs).
func TestFirstToken(t *testing.T) {
	m := linear
	m.PrefillPerBatch = 50
	tests := []struct {
		name   string
		c      Candidate
		queued int // routed after the fill
		newTok int
		want   float64
	}{
		{"idle", Candidate{}, 0, 100, 150},
		{"its head just begun: all of the head's step, then its own", Candidate{QueuedTokens: 300, HeadTokens: 300, HeadMs: 350}, 0, 100, 350 + 150},
		{"its head nearly done: its own step", Candidate{QueuedTokens: 10, HeadTokens: 10, HeadMs: 0}, 0, 100, 150},
		{"waiting behind the head: one step with it", Candidate{QueuedTokens: 500, HeadTokens: 300, HeadMs: 100}, 0, 100, 100 + 350},
		{"routed after the fill: waiting too", Candidate{QueuedTokens: 300, HeadTokens: 300, HeadMs: 100}, 200, 100, 100 + 350},
		{"no head known (a report's tokens): one span", Candidate{QueuedTokens: 200}, 0, 100, 350},
		{"more than a step waiting: two", Candidate{QueuedTokens: 1000}, 0, 100, 1050 + 150},
		// Beside decodes, a step is a decode step (10 ms, the fixed cost)
		// and its prompt tokens.
		{"decoding: a decode step per step", Candidate{QueuedTokens: 300, HeadTokens: 300, HeadMs: 100, Decoding: 1}, 0, 100, 100 + 100 + 10},
		{"decoding, no head in progress: half the decode step it arrives in", Candidate{Decoding: 1}, 0, 100, 5 + 100 + 10},
		{"its head nearly done, decoding: half a decode step, then its own", Candidate{QueuedTokens: 10, HeadTokens: 10, Decoding: 1}, 0, 100, 5 + 100 + 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			c.Timing = m
			if got := c.FirstTokenMs(tt.queued, tt.newTok); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("FirstTokenMs = %v ms, want %v", got, tt.want)
			}
			// The same constant of 50 ms, 20 of it each request's own
			// overhead outside the steps: a step pays 30, and the client
			// sees the first token 20 ms after the engine computes it.
			split := m
			split.PrefillPerRequest = 20
			c.Timing = split
			steps := 0.0
			if c.Decoding == 0 {
				// The steps up to the request's first token: the head's
				// step in progress is timed by HeadMs already.
				steps = float64((c.QueuedTokens-c.HeadTokens+tt.queued+tt.newTok-1)/1000 + 1)
			}
			engine := tt.want - 20*steps
			if got := c.RequestEngineFirstTokenMs(&Request{Tokens: tt.newTok}); tt.queued == 0 && math.Abs(got-engine) > 1e-9 {
				t.Fatalf("split: RequestEngineFirstTokenMs = %v ms, want %v", got, engine)
			}
			if got := c.FirstTokenMs(tt.queued, tt.newTok); math.Abs(got-(engine+20)) > 1e-9 {
				t.Fatalf("split: FirstTokenMs = %v ms, want %v (the engine's %v and the overhead)", got, engine+20, engine)
			}
		})
	}
}

// TestHeadInProgress: the load record tells which of a worker's queued
// tokens are its head's, and how long the head has left, at its pace; a
// request routed behind it waits.
func TestHeadInProgress(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	l := NewLoadClock(func() time.Time { return now })
	// 3000 tokens: three steps of 1000 (1 s each), its last block kept
	// until its first token.
	l.Add("a", w(1), 300, nil)
	fill := func() Candidate {
		c := Candidate{Worker: w(1), Timing: linear}
		l.Fill(&c, 10)
		return c
	}
	now = t0.Add(1500 * time.Millisecond)
	if c := fill(); c.QueuedTokens != 1500 || c.HeadTokens != 1500 || c.HeadMs != 1490 {
		t.Fatalf("half way: queued %d, head %d tokens, %v ms left", c.QueuedTokens, c.HeadTokens, c.HeadMs)
	}
	l.Add("b", w(1), 100, nil)
	c := fill()
	if c.QueuedTokens != 2500 || c.HeadTokens != 1500 {
		t.Fatalf("behind it: queued %d, head %d", c.QueuedTokens, c.HeadTokens)
	}
	// The head's 1490 ms, then b's 1000 tokens and the request's 100 in
	// one step.
	if got := c.FirstTokenMs(0, 100); got != 1490+1100 {
		t.Fatalf("FirstTokenMs = %v", got)
	}
	cs := []Candidate{{Worker: w(1), Timing: linear}}
	l.FillAll(cs, 10)
	if cs[0].HeadTokens != c.HeadTokens || cs[0].HeadMs != c.HeadMs {
		t.Fatalf("FillAll: head %d tokens %v ms, Fill: %d %v", cs[0].HeadTokens, cs[0].HeadMs, c.HeadTokens, c.HeadMs)
	}
	now = t0.Add(time.Hour)
	if c := fill(); c.HeadTokens != 10 || c.HeadMs != 0 {
		t.Fatalf("past its time: head %d tokens, %v ms left", c.HeadTokens, c.HeadMs)
	}
	// b's 990 tokens (one block kept) in a step of 990 ms and, a
	// decoding, a 10 ms decode step.
	l.PrefillDone("a")
	if c := fill(); c.HeadTokens != 1000 || c.HeadMs != 1000 {
		t.Fatalf("b is the head once a's first token is in: %d tokens, %v ms", c.HeadTokens, c.HeadMs)
	}
}

// TestFullHead: a threshold between a request's own step and the head's
// step plus its own: a worker whose head has just begun is full, one whose
// head is nearly done is not.
func TestFullHead(t *testing.T) {
	m := linear
	m.PrefillPerBatch = 50
	req := Request{Blocks: 10, Tokens: 100, BlockSize: 10}
	l := Limits{TTFTMs: 300}
	begun := Candidate{Timing: m, QueuedTokens: 300, HeadTokens: 300, HeadMs: 350}
	if !l.Full(&begun, req) {
		t.Fatal("a worker that has just begun its head is not full")
	}
	nearly := Candidate{Timing: m, QueuedTokens: 10, HeadTokens: 10, HeadMs: 5}
	if l.Full(&nearly, req) {
		t.Fatal("a worker whose head is nearly done is full")
	}
	if !l.Saturated([]Candidate{begun, begun}, req, -1) || l.Saturated([]Candidate{begun, nearly}, req, -1) {
		t.Fatal("Saturated: every candidate full, or not")
	}
}

// roomWorkers is the model, request and workers TestRoom and TestLatestFit
// share: a prompt token costs 1 ms and a step 50 ms; the request is 100
// tokens in 10 blocks; the workers are idle, 350 ms into a head of 300
// tokens, decoding one request, and decoding one while computing a
// 100-token prompt with 50 ms left.
func roomWorkers() (m timingmodel.Model, req Request, idle, begun, decoding, prompting Candidate) {
	m = linear
	m.PrefillPerBatch = 50
	req = Request{Blocks: 10, Tokens: 100, BlockSize: 10}
	idle = Candidate{Timing: m}
	begun = Candidate{Timing: m, QueuedTokens: 300, HeadTokens: 300, HeadMs: 350}
	decoding = Candidate{Timing: m, Decoding: 1}
	prompting = Candidate{Timing: m, Decoding: 1, QueuedTokens: 100, HeadTokens: 100, HeadMs: 50}
	return m, req, idle, begun, decoding, prompting
}

// TestRoom: how many more requests like req fit before every candidate is
// full, counted up to a cap. The model costs a prompt token 1 ms and a
// step 50 ms: at a 400 ms threshold an idle worker holds three requests of
// 100 tokens (150, 250, 350 ms), a worker whose head has just begun none.
func TestRoom(t *testing.T) {
	_, req, idle, begun, decoding, prompting := roomWorkers()
	ttft := Limits{TTFTMs: 400}
	tests := []struct {
		name   string
		l      Limits
		cands  []Candidate
		chosen int
		most   int
		want   int
	}{
		{"limits off: no limit", Limits{}, []Candidate{begun}, -1, 5, 5},
		{"no candidates", ttft, nil, -1, 16, 0},
		{"two idle workers", ttft, []Candidate{idle, idle}, -1, 16, 6},
		{"counted up to the cap", ttft, []Candidate{idle, idle}, -1, 4, 4},
		{"a full worker holds none", ttft, []Candidate{begun, idle}, -1, 16, 3},
		{"every worker full: saturated", ttft, []Candidate{begun, begun}, -1, 16, 0},
		{"the request itself on the chosen one", ttft, []Candidate{idle, idle}, 0, 16, 5},
		{"prefill budget: 0, 100, 200 tokens queued are within 250", Limits{PrefillTokens: 250}, []Candidate{idle, idle}, -1, 16, 6},
		// Each idle worker: 150 ms, then 250 and 350 with one and two
		// queued before the request (the lateness added), 450 with three.
		{"late first tokens: a worker with work holds fewer", Limits{TTFTMs: 400, LateMs: 100}, []Candidate{idle, idle}, -1, 16, 4},
		{"later than the threshold: an idle worker still takes one", Limits{TTFTMs: 400, LateMs: 1000}, []Candidate{idle, idle}, -1, 16, 2},
		{"early first tokens: more room", Limits{TTFTMs: 400, LateMs: -50}, []Candidate{idle, idle}, -1, 16, 8},
		// A decoding worker with no prompt queued: 115 ms (half a decode
		// step, the prompt's step beside the decodes), without the
		// lateness; the next, 215 ms with it.
		{"a decoding worker takes one by its prediction alone", Limits{TTFTMs: 400, LateMs: 300}, []Candidate{decoding}, -1, 16, 1},
		{"then the lateness counts", Limits{TTFTMs: 400, LateMs: 150}, []Candidate{decoding}, -1, 16, 2},
		// A prompt in progress, 50 ms left: 50 ms, then the request's
		// prompt beside the decodes (110 ms), and the lateness.
		{"a prompt queued: the lateness counts", Limits{TTFTMs: 400, LateMs: 300}, []Candidate{prompting}, -1, 16, 0},
		{"a prompt queued, within it", Limits{TTFTMs: 400, LateMs: 200}, []Candidate{prompting}, -1, 16, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.l.Room(tt.cands, req, tt.chosen, tt.most)
			if got != tt.want {
				t.Fatalf("Room = %d, want %d", got, tt.want)
			}
			if sat := tt.l.Saturated(tt.cands, req, tt.chosen); sat != (got == 0 && !tt.l.Off() && len(tt.cands) > 0) {
				t.Fatalf("Saturated = %v with room %d", sat, got)
			}
		})
	}
}

// TestRoomOfEach: the room once req is placed, counted in typical
// requests cached nowhere. TestRoom's model and workers: an idle worker
// predicts 150 ms for 100 tokens and each 100 tokens queued before them
// adds 100 ms; a threshold of 400 ms.
func TestRoomOfEach(t *testing.T) {
	_, req, idle, _, _, _ := roomWorkers()
	ttft := Limits{TTFTMs: 400}
	long := Request{Blocks: 20, Tokens: 200, BlockSize: 10}
	cached := idle
	cached.Overlap = 10
	tests := []struct {
		name    string
		cands   []Candidate
		chosen  int
		req     Request
		typical Request
		want    int
	}{
		// No typical: like req, as Room (250 and 350 ms behind req on
		// the chosen one, 150, 250, 350 on the other).
		{"no typical: like the request", []Candidate{idle, idle}, 0, req, Request{}, 5},
		// 200 tokens: 250 ms on an idle worker, 450 behind one.
		{"typical of 200 tokens: one a worker", []Candidate{idle, idle}, -1, req, long, 2},
		// Behind req's 100 tokens, 350 ms: one.
		{"typical of 200 behind the request", []Candidate{idle, idle}, 0, req, long, 2},
		// Behind 200 tokens of req, 100 more: 350, 450.
		{"typical of 100 behind a request of 200", []Candidate{idle, idle}, 0, long, req, 4},
		// req is all cached on the chosen one (a block to compute): the
		// typical requests are not: 160, 260, 360 ms there, 3 on the
		// other; counted like req (a block each) it would reach the cap.
		{"the request cached, the typical not", []Candidate{cached, idle}, 0, req, req, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ttft.RoomOfEach(len(tt.cands), func(i int) (*Candidate, bool) { return &tt.cands[i], i == tt.chosen }, tt.req, tt.typical, 16)
			if got != tt.want {
				t.Fatalf("RoomOfEach = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestCapacity: the room with no prompt queued on any candidate, their
// decode batches as they are. TestRoom's model and workers: an idle
// worker holds three requests of 100 tokens within 400 ms; a decoding one
// predicts 115 ms for the first, and three within 400 ms (115, 215, 315)
// when first tokens come as predicted.
func TestCapacity(t *testing.T) {
	_, req, idle, begun, decoding, prompting := roomWorkers()
	ttft := Limits{TTFTMs: 400}
	tests := []struct {
		name  string
		l     Limits
		cands []Candidate
		most  int
		want  int
	}{
		{"limits off: most", Limits{}, []Candidate{begun}, 5, 5},
		{"two idle workers", ttft, []Candidate{idle, idle}, 16, 6},
		// Its head (300 tokens, 350 ms left) counted as computed.
		{"a full worker's prompts counted as done", ttft, []Candidate{begun, begun}, 16, 6},
		{"up to the cap", ttft, []Candidate{begun, begun}, 4, 4},
		{"a decoding worker", ttft, []Candidate{decoding}, 16, 3},
		// Its head of 100 tokens is dropped, its decode batch kept: as
		// the decoding worker.
		{"a worker prompting beside its decodes", ttft, []Candidate{prompting}, 16, 3},
		// 115 ms, then 215 + 150 = 365, 315 + 150 = 465 past.
		{"the lateness where prompts are queued", Limits{TTFTMs: 400, LateMs: 150}, []Candidate{prompting}, 16, 2},
		{"prefill budget: 0, 100, 200 tokens within 250", Limits{PrefillTokens: 250}, []Candidate{begun, idle}, 16, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.Capacity(tt.cands, req, tt.most); got != tt.want {
				t.Fatalf("Capacity = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLatestFit: where a backlog's request goes to leave the earliest
// slots to others: of the workers it or a typical request fits on within
// the TTFT limit, the one where a typical request, cached nowhere, is
// predicted latest. The model and workers are TestRoom's: an idle worker
// predicts 150 ms, a decoding one 115 ms, one computing a prompt with 50
// ms left 160 ms (and the lateness), one 350 ms into a head's 300 tokens
// is full (500 ms); one 245 ms from its head's end (margin) predicts 395
// ms for 100 tokens, 415 ms for 120.
func TestLatestFit(t *testing.T) {
	m, req, idle, begun, decoding, prompting := roomWorkers()
	// 300 ms of a head left: 450 ms for a request cached nowhere, past
	// the limit, but 360 ms for this one, which it caches but 10 tokens
	// of.
	cachedBusy := Candidate{Timing: m, QueuedTokens: 300, HeadTokens: 300, HeadMs: 300, Overlap: 9}
	margin := Candidate{Timing: m, QueuedTokens: 300, HeadTokens: 300, HeadMs: 245}
	long := Request{Blocks: 12, Tokens: 120, BlockSize: 10}
	ttft := Limits{TTFTMs: 400}
	tests := []struct {
		name    string
		l       Limits
		cands   []Candidate
		req     Request
		typical int
		chosen  int
		want    int
	}{
		{"no TTFT limit: the caller's pick", Limits{PrefillTokens: 250}, []Candidate{idle, prompting}, req, 0, 0, 0},
		{"the slot predicted latest", ttft, []Candidate{idle, prompting, decoding}, req, 0, 0, 1},
		{"a full worker is no slot", ttft, []Candidate{idle, begun}, req, 0, 0, 0},
		{"fits nowhere: the caller's pick", ttft, []Candidate{begun, begun}, req, 0, 1, 1},
		{"ties: the caller's pick", ttft, []Candidate{idle, idle}, req, 0, 1, 1},
		{"the lateness ranks a worker with prompts queued later", Limits{TTFTMs: 400, LateMs: 200}, []Candidate{idle, prompting}, req, 0, 0, 1},
		{"and makes it full past the limit", Limits{TTFTMs: 400, LateMs: 300}, []Candidate{idle, prompting}, req, 0, 1, 0},
		{"it fits by its cache; the slot is ranked as the others see it", ttft, []Candidate{idle, cachedBusy}, req, 0, 0, 1},
		{"it fits on the margin", ttft, []Candidate{idle, margin}, req, 100, 0, 1},
		{"longer than the typical: the margin a typical fits is its slot", ttft, []Candidate{idle, margin}, long, 100, 0, 1},
		{"longer, no typical: its own fit, the idle worker", ttft, []Candidate{idle, margin}, long, 0, 0, 0},
		{"shorter than the typical: its own fit counts", ttft, []Candidate{idle, margin}, req, 120, 0, 1},
		{"neither fits on the margin: the idle worker", ttft, []Candidate{idle, margin}, long, 110, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.LatestFit(tt.cands, tt.req, tt.typical, tt.chosen); got != tt.want {
				t.Fatalf("LatestFit = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestCheapestFit: a request let go into room held back for it goes to
// the cheapest worker where it fits within the TTFT limit when the
// caller's pick is past it. At a 400 ms limit a request of 100 tokens
// fits on an idle worker (150 ms) and on one whose head has 50 ms left
// (prompting), not behind a head just begun (begun, 500 ms).
func TestCheapestFit(t *testing.T) {
	_, req, idle, begun, _, prompting := roomWorkers()
	ttft := Limits{TTFTMs: 400}
	cost := func(c Candidate, v float64) Candidate { c.Cost = v; return c }
	tests := []struct {
		name   string
		l      Limits
		cands  []Candidate
		chosen int
		want   int
	}{
		{"no TTFT limit: the caller's pick", Limits{PrefillTokens: 250}, []Candidate{cost(begun, 1), cost(idle, 2)}, 0, 0},
		{"the pick fits: kept, however costly", ttft, []Candidate{cost(idle, 9), cost(prompting, 1)}, 0, 0},
		{"the pick is past the limit: the only fit", ttft, []Candidate{cost(begun, 1), cost(idle, 5)}, 0, 1},
		{"the pick is past the limit: the cheapest fit", ttft, []Candidate{cost(begun, 1), cost(idle, 7), cost(prompting, 6)}, 0, 2},
		{"cost ties: the first fit", ttft, []Candidate{cost(begun, 1), cost(prompting, 6), cost(idle, 6)}, 0, 1},
		{"fits nowhere: the caller's pick", ttft, []Candidate{cost(begun, 1), cost(begun, 2)}, 1, 1},
		// As in TestLatestFit: 300 ms late puts prompting past it.
		{"the lateness makes a worker with prompts queued full", Limits{TTFTMs: 400, LateMs: 300}, []Candidate{cost(begun, 1), cost(prompting, 2), cost(idle, 3)}, 0, 2},
		{"no pick", ttft, []Candidate{cost(idle, 1)}, -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.CheapestFit(tt.cands, req, tt.chosen); got != tt.want {
				t.Fatalf("CheapestFit = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestRoomNext: how long until the passing of time alone makes room for
// one more request than Room counts, from the load record's heads in
// progress. The model costs a prompt token 1 ms and a step 50 ms, steps of
// 1000 tokens: a head of 3000 tokens (blocks of 10) computes 1000 tokens
// every 1050 ms, and a request of 100 tokens behind it is predicted at
// the head's time left and its own 150 ms. Each row's next is checked by
// moving the clock: at next there is room for one more, 3 ms before it
// (about three tokens of the head's) there is not.
func TestRoomNext(t *testing.T) {
	m := linear
	m.PrefillPerBatch = 50
	req := Request{Blocks: 10, Tokens: 100, BlockSize: 10}
	// head is a prompt of blocks routed to worker at t0 less ago.
	type head struct {
		worker uint64
		blocks int
		ago    time.Duration
	}
	inf := math.Inf(1)
	tests := []struct {
		name    string
		l       Limits
		workers int
		heads   []head
		most    int
		room    int
		// next is the wanted next in ms (-1: only checked by moving
		// the clock).
		next float64
	}{
		{"limits off: no limit", Limits{}, 1, []head{{1, 300, 0}}, 16, 16, inf},
		// 150, 250, 350 ms fit on the idle worker; 450 never will.
		{"an idle worker: time alone makes no room", Limits{TTFTMs: 400}, 1, nil, 16, 3, inf},
		{"counted up to the cap: nothing to wait for", Limits{TTFTMs: 400}, 2, nil, 4, 4, inf},
		// The head's 2990 tokens left (a block kept to its first token)
		// take 3139.5 ms, the request's own step 150: 1289.5 ms past the
		// threshold, and a token's 1.05 ms to be sure.
		{"a head just begun: room once it is far enough along", Limits{TTFTMs: 2000}, 1, []head{{1, 300, 0}}, 16, 0, 1289.5 + 1.05},
		{"the lateness counts", Limits{TTFTMs: 2000, LateMs: 100}, 1, []head{{1, 300, 0}}, 16, 0, 1389.5 + 1.05},
		// Only once the head is done would the request's 150 ms fit:
		// its first token says when, a change of the record.
		{"room only past the head's end: its first token says", Limits{TTFTMs: 100}, 1, []head{{1, 300, 0}}, 16, 0, inf},
		// 3000 tokens queued, 500 over the budget: the head computes
		// them in 525 ms.
		{"prefill budget: the head computes the excess", Limits{PrefillTokens: 2500}, 1, []head{{1, 300, 0}}, 16, 0, 525 + 1.05},
		{"prefill budget past the head's tokens: never by time", Limits{PrefillTokens: 2500}, 1, []head{{1, 300, 0}, {1, 400, 0}}, 16, 0, inf},
		{"both limits: the later", Limits{TTFTMs: 2000, PrefillTokens: 2500}, 1, []head{{1, 300, 0}}, 16, 0, 1289.5 + 1.05},
		{"two workers: the sooner", Limits{TTFTMs: 2000}, 2, []head{{1, 300, 0}, {2, 300, 500 * time.Millisecond}}, 16, 0, -1},
		// The idle worker holds one (150 ms; 250 is past 200); the busy
		// one's head makes room for the second.
		{"room counted on one worker, made on another", Limits{TTFTMs: 200}, 2, []head{{1, 300, 0}}, 16, 1, -1},
	}
	t0 := time.Unix(1000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			l := NewLoadClock(func() time.Time { return now })
			for i, h := range tt.heads {
				now = t0.Add(-h.ago)
				l.Add(fmt.Sprint("r", i), w(h.worker), h.blocks, nil)
			}
			fill := func(at time.Time) []Candidate {
				now = at
				cs := make([]Candidate, tt.workers)
				for i := range cs {
					cs[i] = Candidate{Worker: w(uint64(i + 1)), Timing: m}
				}
				l.FillAll(cs, req.BlockSize)
				return cs
			}
			room, next := tt.l.RoomNext(fill(t0), req, -1, tt.most)
			if room != tt.room {
				t.Fatalf("RoomNext: room %d, want %d", room, tt.room)
			}
			if got := tt.l.Room(fill(t0), req, -1, tt.most); got != room {
				t.Fatalf("RoomNext's room %d, Room's %d", room, got)
			}
			if tt.next >= 0 && !(math.IsInf(tt.next, 1) && math.IsInf(next, 1) || math.Abs(next-tt.next) < 1e-6) {
				t.Fatalf("RoomNext: next %v ms, want %v", next, tt.next)
			}
			if math.IsInf(next, 1) {
				return
			}
			at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
			if got := tt.l.Room(fill(at(next)), req, -1, tt.most); got <= room {
				t.Fatalf("%v ms on: room %d, want more than %d", next, got, room)
			}
			if got := tt.l.Room(fill(at(next-3)), req, -1, tt.most); got != room {
				t.Fatalf("%v ms on: room %d, want %d still", next-3, got, room)
			}
		})
	}
}
