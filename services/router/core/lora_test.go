package core

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
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
