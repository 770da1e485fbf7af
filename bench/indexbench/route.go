package indexbench

import (
	"fmt"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// RouteCore returns a router core at its defaults holding the workload's
// index, fed through KV events as the service gets it, and a load report
// per worker listing 64 requests of other routers (half of them in
// prefill), plus the target to route to: the state the whole route
// decision is timed in.
func RouteCore(wl *Workload) (*core.Core, *routerv1.Target) {
	return RouteCoreClock(wl, nil)
}

// RouteCoreClock is RouteCore on the given clock (nil: the wall clock).
func RouteCoreClock(wl *Workload, clock func() time.Time) (*core.Core, *routerv1.Target) {
	return routeCore(wl, clock, 0)
}

// RoutePairCoreClock is RouteCoreClock for a disaggregated model: the
// first prefill of the workload's workers register the prefill role, the
// others the decode role, and its decisions are pairs (--disaggregation
// always), priced as --disaggregation auto prices them.
func RoutePairCoreClock(wl *Workload, clock func() time.Time, prefill int) (*core.Core, *routerv1.Target) {
	return routeCore(wl, clock, prefill)
}

func routeCore(wl *Workload, clock func() time.Time, prefill int) (*core.Core, *routerv1.Target) {
	cfg := core.DefaultConfig()
	if prefill > 0 {
		cfg.Disaggregation = core.DisaggAlways
	}
	cfg.Seed = 1
	cfg.Clock = clock
	c := core.New(cfg)
	dumps := wl.Index.Dump()
	var ins []registryclient.Change[*registryv1.Instance]
	var cards []registryclient.Change[*registryv1.ModelCard]
	for i, d := range dumps {
		w := wl.rankOf(d.ID.Instance)
		if w.DPRank != 0 {
			continue // a rank of an instance registered already
		}
		role := commonv1.Role_ROLE_UNSPECIFIED
		if prefill > 0 {
			role = commonv1.Role_ROLE_DECODE
			if i < prefill {
				role = commonv1.Role_ROLE_PREFILL
			}
		}
		ins = append(ins, registryclient.Change[*registryv1.Instance]{Item: &registryv1.Instance{Namespace: "bench", Component: "backend", Endpoint: "generate",
			InstanceId: w.Instance, Role: role, Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}})
		card := &registryv1.ModelCard{Namespace: "bench", Component: "backend", Endpoint: "generate", InstanceId: w.Instance, ModelName: "bench", BlockSize: 16}
		if wl.DPSize > 1 {
			card.DataParallelSize = uint32(wl.DPSize)
		}
		if wl.LoRAs > 0 {
			card.MaxLoras = loraSlots
			for _, name := range wl.loraNames() {
				card.LoraAdapters = append(card.LoraAdapters, &registryv1.LoraAdapter{Name: name})
			}
		}
		cards = append(cards, registryclient.Change[*registryv1.ModelCard]{Item: card})
	}
	c.OnInstances(ins)
	c.OnModels(cards)
	cut := uint64(wl.CPUShare * (1 << 20))
	for _, d := range dumps {
		id := uint64(1)
		for i := 0; i < len(d.Hashes); i += 4096 {
			gpu := &workerv1.KvBlocksStored{}
			cpu := &workerv1.KvBlocksStored{Medium: workerv1.KvMedium_KV_MEDIUM_CPU}
			for _, h := range d.Hashes[i:min(i+4096, len(d.Hashes))] {
				ev := gpu
				if mix(h)%(1<<20) < cut {
					ev = cpu
				}
				ev.Blocks = append(ev.Blocks, &workerv1.KvBlock{SequenceHash: h})
			}
			evs := []*workerv1.KvCacheEvent{{Event: &workerv1.KvCacheEvent_Stored{Stored: gpu}}}
			if len(cpu.Blocks) > 0 {
				evs = append(evs, &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: cpu}})
			}
			w := wl.rankOf(d.ID.Instance)
			c.ApplyEvents(&workerv1.KvEventBatch{InstanceId: w.Instance, DpRank: w.DPRank, FirstEventId: id, Events: evs})
			id += uint64(len(evs))
		}
	}
	ReportLoads(c, wl)
	return c, &routerv1.Target{Kind: &routerv1.Target_Model{Model: "bench"}}
}

// rankOf is the instance and rank the router sees the workload's worker
// as (see Workload.DPSize).
func (wl *Workload) rankOf(worker uint64) index.WorkerID {
	if wl.DPSize <= 1 {
		return index.WorkerID{Instance: worker}
	}
	n := uint64(wl.DPSize)
	return index.WorkerID{Instance: (worker-1)/n + 1, DPRank: uint32((worker - 1) % n)}
}

// FillRequest sets req to the workload's i-th request, by token ids when
// the workload has them and by block hashes otherwise, with the i-th of
// sessions (none when empty): the request a benchmark's decision i sends.
func (wl *Workload) FillRequest(req *routerv1.RouteRequest, i int, sessions []string) {
	if wl.TokenRequests != nil {
		req.TokenIds = wl.TokenRequests[i%len(wl.TokenRequests)]
	} else {
		req.BlockHashes = wl.Requests[i%len(wl.Requests)]
	}
	if len(sessions) > 0 {
		req.SessionId = sessions[i%len(sessions)]
	}
}

// ReportLoads sends every worker's load report: 64 requests of other
// routers, half of them in prefill. Workers publish one a second, and a
// router trusts a report for scheduler.ReportTTL.
// The reports are made once per workload (the router copies what it
// keeps of them).
func ReportLoads(c *core.Core, wl *Workload) {
	if wl.loads == nil || wl.loadsDP != wl.DPSize {
		wl.loads, wl.loadsDP = nil, wl.DPSize
		for _, id := range wl.Index.Workers() {
			w := wl.rankOf(id.Instance)
			m := &workerv1.LoadMetrics{InstanceId: w.Instance, DpRank: w.DPRank, KvBlocksTotal: 1 << 17, RunningRequests: 64, TimingModel: timingmodel.Default().Proto()}
			if names := wl.loraNames(); len(names) > 0 {
				// Each worker has loaded loraSlots adapters, a different
				// run of them per worker.
				for k := range min(loraSlots, len(names)) {
					m.LoraAdapters = append(m.LoraAdapters, names[(int(id.Instance)+k)%len(names)])
				}
			}
			for j := range 64 {
				m.Requests = append(m.Requests, &workerv1.RequestLoad{RequestId: fmt.Sprintf("other-%d-%d", id.Instance, j), DecodeBlocks: 200, PrefillTokens: uint32(j % 2 * 512)})
			}
			wl.loads = append(wl.loads, m)
		}
	}
	for _, m := range wl.loads {
		c.ReportLoad(m)
	}
}

// loraSlots is how many adapters RouteCore's workers hold loaded at once.
const loraSlots = 4

// loraNames is the adapters RouteCore's cards list: LoRAs of them, the
// requests' adapter first.
func (wl *Workload) loraNames() []string {
	if wl.LoRAs <= 0 {
		return nil
	}
	names := make([]string, 0, wl.LoRAs)
	if wl.LoRA != "" {
		names = append(names, wl.LoRA)
	}
	for i := 0; len(names) < wl.LoRAs; i++ {
		if n := fmt.Sprintf("adapter-%d", i); n != wl.LoRA {
			names = append(names, n)
		}
	}
	return names
}
