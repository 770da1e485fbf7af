package core

import (
	"fmt"
	"strconv"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/router/index"
)

// Data-parallel ranks. An engine process serving N data-parallel ranks
// (vLLM's --data-parallel-size) runs N engines, each with its own KV cache,
// queue and batch; its model card says N (data_parallel_size), its KV events
// and load reports name their rank. The router makes each rank a candidate
// of its own, index.WorkerID{Instance, DPRank}: its cached prefix is the
// index's for that rank and its load the router's record and the rank's
// reports. A decision names the rank (RouteResponse.dp_rank) and the
// request plane carries it to the worker (GenerateRequest.dp_rank). A worker
// that declares 0 or 1 rank is one candidate, rank 0.

// maxRanks bounds the ranks taken from a card, as the registry does.
const maxRanks = 1024

// cardRanksLocked records (or, deleted, forgets) the data-parallel size a
// model card declares; under Core.mu.
func (c *Core) cardRanksLocked(card *registryv1.ModelCard, deleted bool) {
	id, n := card.GetInstanceId(), min(card.GetDataParallelSize(), maxRanks)
	models := c.ranks[id]
	if deleted || n <= 1 {
		if models != nil {
			delete(models, card.GetModelName())
			if len(models) == 0 {
				delete(c.ranks, id)
			}
		}
		return
	}
	if models == nil {
		models = map[string]uint32{}
		c.ranks[id] = models
	}
	models[card.GetModelName()] = n
}

// ranksOfLocked is how many ranks an instance serves a model with (any of
// its models when model is empty: an endpoint target): at least 1, and 1
// for a rank-blind router. Under Core.mu.
func (c *Core) ranksOfLocked(id uint64, model string) uint32 {
	if c.rankBlind {
		return 1
	}
	models := c.ranks[id]
	if model != "" {
		return max(1, models[model])
	}
	n := uint32(1)
	for _, m := range models {
		n = max(n, m)
	}
	return n
}

// ranksLocked is how many ranks an instance serves, over all its models.
func (c *Core) ranksLocked(id uint64) uint32 { return c.ranksOfLocked(id, "") }

// expandRanksLocked makes a candidate of each rank of every worker in out
// that serves several; out is returned as it is when none does (the
// common case, which allocates nothing). Under Core.mu.
func (c *Core) expandRanksLocked(out []candidate, model string) []candidate {
	if len(c.ranks) == 0 || c.rankBlind {
		return out
	}
	extra := 0
	for _, cd := range out {
		extra += int(c.ranksOfLocked(cd.in.InstanceId, model)) - 1
	}
	if extra == 0 {
		return out
	}
	all := make([]candidate, 0, len(out)+extra)
	for _, cd := range out {
		for r := range c.ranksOfLocked(cd.in.InstanceId, model) {
			cd.rank = r
			all = append(all, cd)
		}
	}
	return all
}

// WorkerName names a worker for people: the instance's id in hex, with
// "/rank" for a data-parallel rank other than 0 (as the frontend's
// x-switchyard-worker header does).
func WorkerName(instance uint64, rank uint32) string {
	if rank == 0 {
		return strconv.FormatUint(instance, 16)
	}
	return strconv.FormatUint(instance, 16) + "/" + strconv.FormatUint(uint64(rank), 10)
}

func workerName(w index.WorkerID) string { return WorkerName(w.Instance, w.DPRank) }

// rankReason says, for a reason, which rank of its instance d chose when
// the instance serves several; empty otherwise.
func rankReason(d *decision) string {
	w, n := d.scored[d.chosen].Worker, 0
	for i := range d.scored {
		if d.scored[i].Worker.Instance == w.Instance {
			n++
		}
	}
	if n < 2 {
		return ""
	}
	return fmt.Sprintf(" (rank %d, the cheapest of its %d)", w.DPRank, n)
}
