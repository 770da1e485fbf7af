package core

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// adapterCluster is cluster with three workers whose cards list adapters:
// worker 1 serves a and b, worker 2 serves a, worker 3 none.
func adapterCluster(t testing.TB, cfg Config) *Core {
	t.Helper()
	c := cluster(t, cfg, 3)
	lists := map[uint64][]string{1: {"a", "b"}, 2: {"a"}}
	var cards []registryclient.Change[*registryv1.ModelCard]
	for id, names := range lists {
		card := &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: id, ModelName: model, BlockSize: 4, MaxLoras: 2}
		for _, n := range names {
			card.LoraAdapters = append(card.LoraAdapters, &registryv1.LoraAdapter{Name: n})
		}
		cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: card})
	}
	c.OnModels(cards)
	return c
}

// loraRoute routes one request with an adapter; it fails the test on an
// error.
func loraRoute(t *testing.T, c *Core, id, lora string, toks []uint32) *routerv1.RouteResponse {
	t.Helper()
	resp, err := c.Route(&routerv1.RouteRequest{RequestId: id, Target: modelTarget(), TokenIds: toks, LoraName: lora})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestLoRAFilter: a request with an adapter goes only to workers whose
// card lists it, whatever their load and caches (100 requests each), and
// one for an adapter no live worker serves is ErrNoWorker naming it; the
// base model still goes anywhere.
func TestLoRAFilter(t *testing.T) {
	for _, tc := range []struct {
		lora string
		may  map[uint64]bool
	}{
		{"a", map[uint64]bool{1: true, 2: true}},
		{"b", map[uint64]bool{1: true}},
		{"", map[uint64]bool{1: true, 2: true, 3: true}},
	} {
		t.Run("adapter "+tc.lora, func(t *testing.T) {
			c := adapterCluster(t, Config{Mode: ModeKV})
			toks := tokens(64, 1)
			stored(c, 3, 1, toks) // the base prompt cached where no adapter is
			seen := map[uint64]int{}
			for i := range 100 {
				resp := loraRoute(t, c, fmt.Sprint("r", i), tc.lora, toks)
				seen[resp.InstanceId]++
			}
			for id, n := range seen {
				if !tc.may[id] {
					t.Errorf("%d requests went to worker %d, which does not serve %q", n, id, tc.lora)
				}
			}
		})
	}
	c := adapterCluster(t, Config{Mode: ModeKV})
	_, err := c.Route(&routerv1.RouteRequest{RequestId: "x", Target: modelTarget(), TokenIds: tokens(8, 0), LoraName: "c"})
	if !errors.Is(err, ErrNoWorker) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("an adapter nobody serves: %v, want ErrNoWorker naming it", err)
	}
	_, err = c.Route(&routerv1.RouteRequest{RequestId: "y", Target: modelTarget(), TokenIds: tokens(8, 0), LoraName: "b", ExcludeInstanceIds: []uint64{1}})
	if !errors.Is(err, ErrNoWorker) {
		t.Fatalf("the only worker with b excluded: %v, want ErrNoWorker", err)
	}
	// A card that drops the adapter takes its worker out at once.
	c.OnModels([]registryclient.Change[*registryv1.ModelCard]{{Item: &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: 1, ModelName: model, BlockSize: 4}}})
	if _, err := c.Route(&routerv1.RouteRequest{RequestId: "z", Target: modelTarget(), TokenIds: tokens(8, 0), LoraName: "b"}); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("after the card dropped b: %v, want ErrNoWorker", err)
	}
}

// TestLoRALoadCost: a worker without the adapter loaded is priced with its
// published load time, one with it loaded (by its report, or by a request
// routed there with it that still runs) without; adapter-blind pricing
// ignores loads; a base request pays none.
func TestLoRALoadCost(t *testing.T) {
	tm := timingmodel.Default()
	tm.LoraLoadMs = 300
	publish := func(c *Core, id uint64, loaded ...string) {
		c.ReportLoad(&workerv1.LoadMetrics{InstanceId: id, TimingModel: tm.Proto(), LoraAdapters: loaded, Requests: []*workerv1.RequestLoad{}})
	}
	costs := func(t *testing.T, c *Core, lora string) map[uint64]float64 {
		t.Helper()
		q, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: tokens(32, 5), LoraName: lora})
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint64]float64{}
		for _, cd := range q.Candidates {
			out[cd.InstanceId] = cd.LoraLoadMs
		}
		return out
	}
	tests := []struct {
		name   string
		blind  bool
		loaded map[uint64][]string
		lora   string
		want   map[uint64]float64
	}{
		{name: "none loaded", lora: "a", want: map[uint64]float64{1: 300, 2: 300}},
		{name: "loaded on 2", lora: "a", loaded: map[uint64][]string{2: {"a"}}, want: map[uint64]float64{1: 300, 2: 0}},
		{name: "another adapter loaded", lora: "a", loaded: map[uint64][]string{1: {"b"}}, want: map[uint64]float64{1: 300, 2: 300}},
		{name: "blind", blind: true, lora: "a", loaded: map[uint64][]string{2: {"a"}}, want: map[uint64]float64{1: 0, 2: 0}},
		{name: "base model", lora: "", want: map[uint64]float64{1: 0, 2: 0, 3: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := adapterCluster(t, Config{Mode: ModeKV, AdapterBlind: tt.blind})
			for id := uint64(1); id <= 3; id++ {
				publish(c, id, tt.loaded[id]...)
			}
			got := costs(t, c, tt.lora)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("load times %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("a routed request holds its adapter", func(t *testing.T) {
		c := adapterCluster(t, Config{Mode: ModeKV})
		for id := uint64(1); id <= 3; id++ {
			publish(c, id)
		}
		first := loraRoute(t, c, "r1", "a", tokens(32, 5)).InstanceId
		if got := costs(t, c, "a")[first]; got != 0 {
			t.Fatalf("worker %d runs a request with a: load %v, want 0", first, got)
		}
		if second := loraRoute(t, c, "r2", "a", tokens(32, 9)).InstanceId; second != first {
			t.Fatalf("the second request for a went to %d, not to %d which is loading it", second, first)
		}
		c.Free("r1")
		c.Free("r2")
		if got := costs(t, c, "a")[first]; got != 300 {
			t.Fatalf("after its requests ended, worker %d (not reporting a): load %v, want 300", first, got)
		}
	})
}

// TestLoRACachesApart: the same prompt cached under adapter a, under b
// and for the base model matches only its own kind of request.
func TestLoRACachesApart(t *testing.T) {
	c := adapterCluster(t, Config{Mode: ModeKV})
	prompt := tokens(64, 3)
	storedExtra := func(instance, firstID uint64, lora string) {
		ev := &workerv1.KvBlocksStored{}
		for _, b := range kvhash.ExtraHashes(prompt, 4, kvhash.Extra{LoRA: lora}, nil) {
			ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
		}
		c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: instance, FirstEventId: firstID, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
	}
	storedExtra(1, 1, "b")
	storedExtra(2, 1, "a")
	storedExtra(3, 1, "")
	for _, tc := range []struct {
		lora   string
		worker uint64
	}{{"a", 2}, {"b", 1}, {"", 3}} {
		q, err := c.QueryOverlaps(&routerv1.QueryOverlapsRequest{Target: modelTarget(), TokenIds: prompt, LoraName: tc.lora})
		if err != nil {
			t.Fatal(err)
		}
		for _, cd := range q.Candidates {
			want := uint32(0)
			if cd.InstanceId == tc.worker {
				want = 16
			}
			if cd.OverlapBlocks != want {
				t.Errorf("adapter %q, worker %d: %d blocks cached, want %d", tc.lora, cd.InstanceId, cd.OverlapBlocks, want)
			}
		}
	}
}

// TestLoRABadRequests: names that are empty, too long, not UTF-8 or with
// control characters, and an adapter with block_hashes, are ErrInvalid.
func TestLoRABadRequests(t *testing.T) {
	c := adapterCluster(t, Config{Mode: ModeKV})
	for _, tc := range []struct {
		name   string
		lora   string
		hashes []uint64
	}{
		{"too long", strings.Repeat("x", MaxLoRANameLen+1), nil},
		{"not UTF-8", "a\xff", nil},
		{"control character", "a\nb", nil},
		{"delete character", "a\x7f", nil},
		{"with block_hashes", "a", []uint64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &routerv1.RouteRequest{RequestId: "r", Target: modelTarget(), LoraName: tc.lora, BlockHashes: tc.hashes}
			if tc.hashes == nil {
				r.TokenIds = tokens(8, 0)
			}
			if _, err := c.Route(r); !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
	if err := ValidLoRAName(strings.Repeat("x", MaxLoRANameLen)); err != nil {
		t.Fatalf("a name of the longest length: %v", err)
	}
	if err := ValidLoRAName(""); err == nil {
		t.Fatal("the empty name is valid")
	}
}

// FuzzLoRARoute: any adapter name and prompt either routes to a worker
// whose card lists the adapter or fails with ErrInvalid or ErrNoWorker.
func FuzzLoRARoute(f *testing.F) {
	f.Add("a", []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add("b", []byte{9})
	f.Add("", []byte{})
	f.Add("a\x00", []byte{1, 2, 3, 4})
	f.Add(strings.Repeat("z", 300), []byte{1})
	c := adapterCluster(f, Config{Mode: ModeKV})
	serves := map[string]map[uint64]bool{"a": {1: true, 2: true}, "b": {1: true}, "": {1: true, 2: true, 3: true}}
	f.Fuzz(func(t *testing.T, lora string, raw []byte) {
		toks := make([]uint32, len(raw))
		for i, b := range raw {
			toks[i] = uint32(b)
		}
		resp, err := c.Route(&routerv1.RouteRequest{RequestId: "f", Target: modelTarget(), TokenIds: toks, LoraName: lora})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNoWorker) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		defer c.Free("f")
		if !serves[lora][resp.InstanceId] {
			t.Fatalf("adapter %q routed to worker %d", lora, resp.InstanceId)
		}
	})
}

// TestAdapterPrice: whether a request's adapter loads on a worker and how
// long it waits for a slot, from the adapters of the worker's running
// requests: no wait while they and it fit the slots (or the slots are
// unknown); else the adapters take the slots in order (those the worker
// reported loaded, then by their first request's routing), and one past
// the slots waits until enough of those ahead of it have no request left,
// an adapter's k requests ending H(k) mean runs after the latest of their
// first tokens (or now).
func TestAdapterPrice(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
	// Per adapter, its requests' routing and first token, ms from now.
	type req struct{ at, first int }
	run := func(runMs float64, loaded []string, reqs map[string][]req) *adapterWorker {
		st := &adapterWorker{runMs: runMs}
		st.setLoaded(loaded)
		for name, rs := range reqs {
			for i, r := range rs {
				st.addRunning(name, loraKey(name), adapterRequest{id: fmt.Sprint(name, i), at: at(r.at), first: at(r.first)})
			}
		}
		return st
	}
	// At a mean run of 100 ms: a ends in 100 ms (its first token came),
	// b in 80 + 1.5 x 100 = 230 (two requests), c in 300 + 100 = 400.
	ab := map[string][]req{"a": {{-300, -250}}, "b": {{-200, 50}, {-100, 80}}}
	abc := map[string][]req{"a": {{-300, -250}}, "b": {{-200, 50}, {-100, 80}}, "c": {{-50, 300}}}
	tests := []struct {
		name   string
		st     *adapterWorker
		slots  int
		lora   string
		load   bool
		wantMs float64
	}{
		{name: "no state", st: nil, slots: 4, lora: "a", load: true},
		{name: "reported loaded, nothing runs", st: run(100, []string{"a"}, nil), slots: 2, lora: "a"},
		{name: "a slot free", st: run(100, nil, ab), slots: 3, lora: "c", load: true},
		{name: "slots unknown", st: run(100, nil, ab), slots: 0, lora: "c", load: true},
		{name: "running in a slot", st: run(100, nil, ab), slots: 2, lora: "a"},
		{name: "full: the first adapter to end", st: run(100, nil, ab), slots: 2, lora: "c", load: true, wantMs: 100},
		{name: "the last of k requests: H(k) mean runs", st: run(100, nil, map[string][]req{"a": {{-300, -10}, {-20, -5}, {-10, -1}}, "b": {{-200, 150}}}), slots: 2, lora: "c", load: true, wantMs: 100 * (1 + 1.0/2 + 1.0/3)},
		{name: "two ahead past the slots: the second to end", st: run(100, nil, abc), slots: 2, lora: "d", load: true, wantMs: 230},
		{name: "routed but past the slots: waits for those ahead, loads", st: run(100, nil, abc), slots: 2, lora: "c", load: true, wantMs: 100},
		{name: "reported loaded goes first", st: run(100, []string{"c"}, abc), slots: 2, lora: "b", load: true, wantMs: 100},
		{name: "reported loaded holds its slot", st: run(100, []string{"c"}, abc), slots: 2, lora: "c"},
		{name: "loaded but idle: no load, still a wait", st: run(100, []string{"d"}, ab), slots: 2, lora: "d", wantMs: 100},
		{name: "long past its first token: a mean run left", st: run(100, nil, map[string][]req{"a": {{-9000, -5000}}, "b": {{-200, 900}}}), slots: 2, lora: "c", load: true, wantMs: 100},
		{name: "one slot", st: run(100, nil, map[string][]req{"a": {{-10, -10}, {-5, 20}}}), slots: 1, lora: "b", load: true, wantMs: 170},
		{name: "run time unknown: to the first tokens", st: run(0, nil, map[string][]req{"a": {{-10, 40}}, "b": {{-5, 70}}}), slots: 2, lora: "c", load: true, wantMs: 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			load, wait := tt.st.price(tt.lora, loraKey(tt.lora), tt.slots, now)
			if load != tt.load || math.Abs(wait-tt.wantMs) > 1e-9 {
				t.Errorf("price: load %v, wait %v ms; want %v, %v ms", load, wait, tt.load, tt.wantMs)
			}
			if tt.st == nil {
				return
			}
			// The shortcut on the sets' summaries answers as the whole
			// reckoning does.
			if load2, wait2 := tt.st.priceRunning(tt.lora, loraKey(tt.lora), tt.slots, now); load2 != load || wait2 != wait {
				t.Errorf("priceRunning: load %v, wait %v ms; price said %v, %v ms", load2, wait2, load, wait)
			}
		})
	}
}

// TestAdapterWorkerSets: a worker's loaded and running adapters are found
// by key and name whatever the order of reports, routes and frees, and the
// summaries (loadedBits, runningBits) hold the bit of every member's key,
// so that a clear bit rules an adapter out. Keys are given by hand where a
// case needs two names on one key (which loraKey makes only past the names
// it numbers).
func TestAdapterWorkerSets(t *testing.T) {
	type op struct {
		kind string // "load" (names is the report), "run", "end"
		name string
		key  uint64 // 0: loraKey(name)
		id   string
		load []string
	}
	tests := []struct {
		name string
		ops  []op
		// running is each running adapter's request ids, sorted.
		running map[string][]string
		loaded  []string
	}{
		{name: "empty", running: map[string][]string{}},
		{name: "one request", ops: []op{{kind: "run", name: "a", id: "1"}}, running: map[string][]string{"a": {"1"}}},
		{name: "two requests, one adapter", ops: []op{{kind: "run", name: "a", id: "1"}, {kind: "run", name: "a", id: "2"}},
			running: map[string][]string{"a": {"1", "2"}}},
		{name: "the last request ends: the adapter goes", ops: []op{{kind: "run", name: "a", id: "1"}, {kind: "run", name: "b", id: "2"}, {kind: "end", name: "a", id: "1"}},
			running: map[string][]string{"b": {"2"}}},
		{name: "one of two ends", ops: []op{{kind: "run", name: "a", id: "1"}, {kind: "run", name: "a", id: "2"}, {kind: "end", name: "a", id: "1"}},
			running: map[string][]string{"a": {"2"}}},
		{name: "an unknown end changes nothing", ops: []op{{kind: "run", name: "a", id: "1"}, {kind: "end", name: "b", id: "1"}, {kind: "end", name: "a", id: "9"}},
			running: map[string][]string{"a": {"1"}}},
		{name: "two names on one key stay apart", ops: []op{{kind: "run", name: "a", key: 7, id: "1"}, {kind: "run", name: "b", key: 7, id: "2"}, {kind: "end", name: "a", key: 7, id: "1"}},
			running: map[string][]string{"b": {"2"}}},
		{name: "one bit, two keys: the other keeps it", ops: []op{{kind: "run", name: "a", key: 3, id: "1"}, {kind: "run", name: "b", key: 67, id: "2"}, {kind: "end", name: "a", key: 3, id: "1"}},
			running: map[string][]string{"b": {"2"}}},
		{name: "all end", ops: []op{{kind: "run", name: "a", id: "1"}, {kind: "run", name: "b", id: "2"}, {kind: "end", name: "b", id: "2"}, {kind: "end", name: "a", id: "1"}},
			running: map[string][]string{}},
		{name: "reports replace the loaded set", ops: []op{{kind: "load", load: []string{"a", "b"}}, {kind: "load", load: []string{"c"}}},
			running: map[string][]string{}, loaded: []string{"c"}},
		{name: "an empty report", ops: []op{{kind: "load", load: []string{"a"}}, {kind: "load"}}, running: map[string][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &adapterWorker{}
			keys := map[string]uint64{}
			keyOf := func(o op) uint64 {
				if o.key != 0 {
					keys[o.name] = o.key
					return o.key
				}
				keys[o.name] = loraKey(o.name)
				return keys[o.name]
			}
			for _, o := range tt.ops {
				switch o.kind {
				case "load":
					st.setLoaded(o.load)
				case "run":
					st.addRunning(o.name, keyOf(o), adapterRequest{id: o.id})
				case "end":
					st.dropRunning(o.name, keyOf(o), o.id)
				}
			}
			got := map[string][]string{}
			var bits uint64
			for _, r := range st.running {
				if len(r.reqs) == 0 {
					t.Errorf("adapter %q runs with no request", r.name)
				}
				if _, dup := got[r.name]; dup {
					t.Errorf("adapter %q listed twice", r.name)
				}
				ids := []string{}
				for _, q := range r.reqs {
					ids = append(ids, q.id)
				}
				slices.Sort(ids)
				got[r.name] = ids
				bits |= keyBit(r.key)
			}
			if diff := cmp.Diff(tt.running, got); diff != "" {
				t.Errorf("running (-want +got):\n%s", diff)
			}
			if bits != st.runningBits {
				t.Errorf("runningBits %#x, want %#x", st.runningBits, bits)
			}
			var lbits uint64
			for _, n := range st.loaded {
				lbits |= keyBit(loraKey(n))
			}
			if lbits != st.loadedBits {
				t.Errorf("loadedBits %#x, want %#x", st.loadedBits, lbits)
			}
			for _, n := range []string{"a", "b", "c", "d"} {
				k, ok := keys[n]
				if !ok {
					k = loraKey(n)
				}
				if _, want := tt.running[n]; (st.runningIndex(n, k) >= 0) != want {
					t.Errorf("runningIndex(%q) = %d, want running %v", n, st.runningIndex(n, k), want)
				}
				if got, want := st.isLoaded(n, loraKey(n)), slices.Contains(tt.loaded, n); got != want {
					t.Errorf("isLoaded(%q) = %v, want %v", n, got, want)
				}
			}
		})
	}
}

// TestLoRAKeyTable: the first names asked are numbered in that order (the
// first 64 get a summary bit each), a name keeps its key, and names past
// the table's size get hashed keys with the top bit set, which no number
// takes.
func TestLoRAKeyTable(t *testing.T) {
	tab := newLoRAKeyTable(3)
	for _, tc := range []struct {
		name  string
		dense bool
		want  uint64
	}{
		{"a", true, 0}, {"b", true, 1}, {"a", true, 0}, {"c", true, 2}, {"d", false, 0}, {"b", true, 1},
	} {
		got := tab.key(tc.name)
		if tc.dense && got != tc.want || !tc.dense && got>>63 != 1 {
			t.Fatalf("key(%q) = %#x, want %#x (dense %v)", tc.name, got, tc.want, tc.dense)
		}
	}
	if d, e := tab.key("d"), tab.key("e"); d != tab.key("d") || d == e || len(tab.dense) != 3 {
		t.Fatalf("past the table: d %#x (again %#x), e %#x, %d numbered", d, tab.key("d"), e, len(tab.dense))
	}
}

// TestLoRASlotWait: a router prices the wait for a slot on a worker whose
// slots every running adapter holds, predicted from the worker's report
// (its requests' mean output times its timing model's decode step) and
// when the requests were routed; it sends a request there only when the
// wait is shorter than what the worker's cache saves, and prices no wait
// once an adapter's requests end, or when blind to adapters.
func TestLoRASlotWait(t *testing.T) {
	t0 := time.Unix(5000, 0)
	now := t0
	tm := timingmodel.Default()
	tm.LoraLoadMs = 50
	// 100 tokens per request, at a decode step of the default model at
	// no KV usage.
	runMs := 100 * tm.DecodeMs(0)
	prompt := tokens(4000, 11)
	setup := func(t *testing.T, blind bool) *Core {
		t.Helper()
		c := cluster(t, Config{Mode: ModeKV, AdapterBlind: blind, Clock: func() time.Time { return now }}, 2)
		var cards []registryclient.Change[*registryv1.ModelCard]
		for id := uint64(1); id <= 2; id++ {
			card := &registryv1.ModelCard{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceId: id, ModelName: model, BlockSize: 4, MaxLoras: 2}
			for _, n := range []string{"a", "b", "c"} {
				card.LoraAdapters = append(card.LoraAdapters, &registryv1.LoraAdapter{Name: n})
			}
			cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: card})
		}
		c.OnModels(cards)
		for id := uint64(1); id <= 2; id++ {
			c.ReportLoad(&workerv1.LoadMetrics{InstanceId: id, TimingModel: tm.Proto(), Requests: []*workerv1.RequestLoad{},
				RequestsTotal: 10, OutputTokensTotal: 1000})
		}
		// Worker 1 caches the prompt under adapter c.
		ev := &workerv1.KvBlocksStored{}
		for _, b := range kvhash.ExtraHashes(prompt, 4, kvhash.Extra{LoRA: "c"}, nil) {
			ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: b.Sequence, LocalHash: b.Local})
		}
		c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: 1, FirstEventId: 1, Events: []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: ev}}}})
		// Worker 1 runs a request with a and, 100 ms later, one with b:
		// both of its slots (as another replica routed them, at those
		// times, so that they end runMs after).
		w1 := index.WorkerID{Instance: 1}
		ra := RoutedEvent("ra", w1, 0, nil)
		ra.GetRouted().LoraName = "a"
		c.ApplyReplica(ra, t0)
		rb := RoutedEvent("rb", w1, 0, nil)
		rb.GetRouted().LoraName = "b"
		c.ApplyReplica(rb, t0.Add(100*time.Millisecond))
		return c
	}
	waits := func(t *testing.T, c *Core, lora string) (w1, w2 float64) {
		t.Helper()
		d, err := c.evaluate(query{target: modelTarget(), tokens: prompt, lora: lora})
		if err != nil {
			t.Fatal(err)
		}
		defer d.release()
		for _, s := range d.scored {
			if s.Worker.Instance == 1 {
				w1 = s.SlotWaitMs
			} else {
				w2 = s.SlotWaitMs
			}
		}
		return w1, w2
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

	now = t0.Add(200 * time.Millisecond)
	c := setup(t, false)
	// Both first tokens are due (a replica's decisions are heard
	// without their predictions): a and b end a mean run from now.
	if w1, w2 := waits(t, c, "c"); !near(w1, runMs) || w2 != 0 {
		t.Fatalf("adapter c: slot waits %v and %v ms, want %v (a mean run) and 0", w1, w2, runMs)
	}
	if w1, _ := waits(t, c, "a"); w1 != 0 {
		t.Fatalf("adapter a, running on worker 1: slot wait %v, want 0", w1)
	}
	// The prompt's prefill (4,000 tokens) is shorter than the wait: the
	// request goes to worker 2, which has a free slot.
	if got := loraRoute(t, c, "rc", "c", prompt).InstanceId; got != 2 {
		t.Fatalf("a request for c went to worker %d, whose slots are held for %v ms; want 2", got, runMs)
	}
	c.Free("rc")
	// A second request with a keeps a's slot longer (the last of two
	// ends 1.5 mean runs on): b still ends first.
	ra2 := RoutedEvent("ra2", index.WorkerID{Instance: 1}, 0, nil)
	ra2.GetRouted().LoraName = "a"
	c.ApplyReplica(ra2, now)
	now = now.Add(50 * time.Millisecond)
	c.ReportLoad(&workerv1.LoadMetrics{InstanceId: 1, TimingModel: tm.Proto(), Requests: []*workerv1.RequestLoad{},
		RequestsTotal: 10, OutputTokensTotal: 1000, LoraAdapters: []string{"b"}})
	// Now b, reported loaded, holds its slot first: a request with a
	// (routed after it) is still in its slot too.
	if w1, _ := waits(t, c, "a"); w1 != 0 {
		t.Fatalf("adapter a with b reported loaded: slot wait %v, want 0", w1)
	}
	if w1, _ := waits(t, c, "c"); !near(w1, runMs) {
		t.Fatalf("after a second request with a: slot wait %v, want %v (b's)", w1, runMs)
	}
	// b's request ends: a slot is free, the cached worker wins.
	c.Free("rb")
	if w1, _ := waits(t, c, "c"); w1 != 0 {
		t.Fatalf("with b's request over: slot wait %v, want 0", w1)
	}
	if got := loraRoute(t, c, "rc2", "c", prompt).InstanceId; got != 1 {
		t.Fatalf("with a slot free, a request for c went to worker %d, not to worker 1 which caches it", got)
	}
	// Its first token is predicted after its own prefill and its
	// adapter's load.
	c.loras.mu.Lock()
	st := c.loras.workers[index.WorkerID{Instance: 1}]
	first := st.running[st.runningIndex("c", loraKey("c"))].reqs[0].first
	c.loras.mu.Unlock()
	if got := ms(first.Sub(now)); got < tm.LoraLoadMs {
		t.Fatalf("a routed request's first token is predicted %v ms away, want at least the load's %v", got, tm.LoraLoadMs)
	}
	// Long after, the requests still running hold their slots for a
	// mean run more: a request with b waits for c's (one request).
	now = now.Add(time.Minute)
	if w1, _ := waits(t, c, "b"); !near(w1, runMs) {
		t.Fatalf("a minute on: slot wait %v, want %v", w1, runMs)
	}

	now = t0.Add(200 * time.Millisecond)
	blind := setup(t, true)
	if w1, w2 := waits(t, blind, "c"); w1 != 0 || w2 != 0 {
		t.Fatalf("blind: slot waits %v and %v, want none", w1, w2)
	}
	if got := loraRoute(t, blind, "rc", "c", prompt).InstanceId; got != 1 {
		t.Fatalf("blind: a request for c went to worker %d, not to worker 1 which caches it", got)
	}
}
