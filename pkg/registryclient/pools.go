package registryclient

import (
	"sort"
	"strconv"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Pool is one model's instances counted by role: a model with prefill and
// decode instances is served disaggregated.
type Pool struct {
	Model   string `json:"model"`
	Agg     int    `json:"agg"`
	Prefill int    `json:"prefill"`
	Decode  int    `json:"decode"`
}

// Disaggregated says the model has both a prefill and a decode pool.
func (p Pool) Disaggregated() bool { return p.Prefill > 0 && p.Decode > 0 }

// Pools counts, per model, the instances that serve it by role: a model card
// is joined to the instance of the same namespace, component, endpoint and
// instance id, whose role counts (ROLE_UNSPECIFIED as agg); a card whose
// instance is not listed counts as agg. Sorted by model name.
func Pools(cards []*registryv1.ModelCard, instances []*registryv1.Instance) []Pool {
	type key struct {
		ns, comp, ep string
		id           uint64
	}
	roles := make(map[key]commonv1.Role, len(instances))
	for _, in := range instances {
		roles[key{in.Namespace, in.Component, in.Endpoint, in.InstanceId}] = in.Role
	}
	byModel := map[string]*Pool{}
	for _, c := range cards {
		p := byModel[c.ModelName]
		if p == nil {
			p = &Pool{Model: c.ModelName}
			byModel[c.ModelName] = p
		}
		switch wire.EffectiveRole(roles[key{c.Namespace, c.Component, c.Endpoint, c.InstanceId}]) {
		case commonv1.Role_ROLE_PREFILL:
			p.Prefill++
		case commonv1.Role_ROLE_DECODE:
			p.Decode++
		default:
			p.Agg++
		}
	}
	out := make([]Pool, 0, len(byModel))
	for _, p := range byModel {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// String is the pool as `switchyard status` and the status page show it:
// "agg 2", "prefill 2, decode 2", the roles with instances, in that order.
func (p Pool) String() string {
	var s string
	for _, part := range []struct {
		name string
		n    int
	}{{wire.RoleAgg, p.Agg}, {wire.RolePrefill, p.Prefill}, {wire.RoleDecode, p.Decode}} {
		if part.n == 0 {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += part.name + " " + strconv.Itoa(part.n)
	}
	if s == "" {
		return "-"
	}
	return s
}
