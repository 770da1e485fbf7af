package planner

import (
	"sync"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// fleet is what the planner knows of the workers between decisions: each
// instance's last load report and its request counts at the start of the
// interval, from which the interval's demand is measured.
type fleet struct {
	mu      sync.Mutex
	workers map[uint64]*reported
}

type reported struct {
	last *workerv1.LoadMetrics
	// at is when the planner received the last report.
	at time.Time
	// base and cur are the counts at the interval's start and now;
	// hasBase is false until a report has been seen at a decision.
	base, cur core.Counters
	hasBase   bool
}

func newFleet() *fleet { return &fleet{workers: map[uint64]*reported{}} }

// report records a load report received at now. The counts are taken at
// now, not at the report's timestamp: an engine stamps its load at its
// last step, which an idle engine does not renew, while the counts are
// the worker's at the report.
func (f *fleet) report(m *workerv1.LoadMetrics, now time.Time) {
	c := core.Counters{At: now, Requests: m.GetRequestsTotal(), PromptTokens: m.GetPromptTokensTotal(), OutputTokens: m.GetOutputTokensTotal(),
		CachedPromptTokens: m.GetCachedPromptTokensTotal()}
	for i, n := range m.GetComputedPromptRequestsTotal() {
		if i < len(c.ComputedPromptRequests) {
			c.ComputedPromptRequests[i] = n
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[m.GetInstanceId()]
	if w == nil {
		w = &reported{}
		f.workers[m.GetInstanceId()] = w
	}
	if c.Requests < w.cur.Requests || c.PromptTokens < w.cur.PromptTokens || c.OutputTokens < w.cur.OutputTokens || c.CachedPromptTokens < w.cur.CachedPromptTokens {
		// Counts that went down are a new process under the same id:
		// measure from here.
		w.hasBase = false
	}
	w.last, w.at, w.cur = m, now, c
}

// member is a registered worker instance and the pool it belongs to.
type member struct {
	inst      *registryv1.Instance
	pool      core.PoolKey
	blockSize int
}

// members joins model cards to their instances: a card names the model
// its instance serves, the instance its role (agg when unset).
func members(cards []*registryv1.ModelCard, instances []*registryv1.Instance) []member {
	type key struct {
		ns, comp, ep string
		id           uint64
	}
	byKey := make(map[key]*registryv1.Instance, len(instances))
	for _, in := range instances {
		byKey[key{in.Namespace, in.Component, in.Endpoint, in.InstanceId}] = in
	}
	seen := map[uint64]bool{}
	var out []member
	for _, c := range cards {
		in := byKey[key{c.Namespace, c.Component, c.Endpoint, c.InstanceId}]
		if in == nil || seen[in.InstanceId] {
			continue
		}
		seen[in.InstanceId] = true
		out = append(out, member{inst: in, pool: core.PoolKey{Model: c.ModelName, Role: roleOf(in.Role)}, blockSize: int(c.BlockSize)})
	}
	return out
}

func roleOf(r commonv1.Role) core.Role {
	switch wire.EffectiveRole(r) {
	case commonv1.Role_ROLE_PREFILL:
		return core.Prefill
	case commonv1.Role_ROLE_DECODE:
		return core.Decode
	}
	return core.Agg
}

// observe builds the decision's observations at now: per pool, its
// registered workers (less those draining) with their last reports, the
// workers the connector has started that have not registered, and the
// demand since the last observe, the sum over the pool's workers of their
// counts' rates. It starts the next interval. Reports of instances no
// longer registered are forgotten.
func (f *fleet) observe(now time.Time, ms []member, draining func(uint64) bool, pinned func(*registryv1.Instance) bool, starting map[core.PoolKey]int) []core.PoolObservation {
	f.mu.Lock()
	defer f.mu.Unlock()
	pools := map[core.PoolKey]*core.PoolObservation{}
	get := func(k core.PoolKey) *core.PoolObservation {
		o := pools[k]
		if o == nil {
			o = &core.PoolObservation{Key: k}
			pools[k] = o
		}
		return o
	}
	live := map[uint64]bool{}
	for _, m := range ms {
		id := m.inst.InstanceId
		live[id] = true
		if draining(id) {
			continue
		}
		o := get(m.pool)
		w := core.Worker{ID: id, Engine: core.Engine{Model: timingmodel.Default(), BlockSize: m.blockSize}, Pinned: pinned(m.inst)}
		r := f.workers[id]
		if r != nil {
			l := r.last
			w.Model = timingmodel.FromProto(l.GetTimingModel())
			w.KVBlocks = int(min(l.GetKvBlocksTotal(), 1<<40))
			w.Reported = r.at
			w.Queued = int(min(l.GetActivePrefillTokens(), 1<<40))
			w.Running, w.Waiting = int(l.GetRunningRequests()), int(l.GetWaitingRequests())
			if t := l.GetKvBlocksTotal(); t > 0 {
				w.Usage = min(float64(l.GetKvBlocksUsed())/float64(t), 1)
			}
			if r.hasBase {
				if d, ok := core.Rates(r.base, r.cur); ok {
					o.Demand.RequestsPerSec += d.RequestsPerSec
					o.Demand.PromptTokensPerSec += d.PromptTokensPerSec
					o.Demand.OutputTokensPerSec += d.OutputTokensPerSec
					o.Demand.CachedPromptTokensPerSec += d.CachedPromptTokensPerSec
					for i, v := range d.ComputedPromptRequestsPerSec {
						o.Demand.ComputedPromptRequestsPerSec[i] += v
					}
					o.Demand.At = now
				}
			}
			r.base, r.hasBase = r.cur, true
		}
		o.Workers = append(o.Workers, w)
	}
	for k, n := range starting {
		if n > 0 {
			get(k).Starting = n
		}
	}
	for id := range f.workers {
		if !live[id] {
			delete(f.workers, id)
		}
	}
	out := make([]core.PoolObservation, 0, len(pools))
	for _, o := range pools {
		out = append(out, *o)
	}
	return out
}
