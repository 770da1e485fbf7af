package obs

import "github.com/prometheus/client_golang/prometheus"

// EngineSnapshot is an inference engine's state as the mocker and the
// adapter report it. Counters are cumulative; a field the engine does not
// report is left zero.
type EngineSnapshot struct {
	Running, Waiting            int
	KVBlocksUsed, KVBlocksTotal int
	// PrefixQueriedBlocks and PrefixHitBlocks count prompt blocks looked up
	// in the prefix cache and found there.
	PrefixQueriedBlocks, PrefixHitBlocks uint64
	Preemptions                          uint64
	PromptTokens, GeneratedTokens        uint64
}

// engineCollector reads a snapshot at each scrape, so the metrics are never
// staler than the engine's own state and cost nothing between scrapes.
type engineCollector struct {
	read  func() EngineSnapshot
	descs map[string]*prometheus.Desc
}

var engineMetrics = []struct {
	name, help string
	counter    bool
	value      func(EngineSnapshot) float64
}{
	{"switchyard_engine_running_requests", "Requests the engine is running.", false, func(s EngineSnapshot) float64 { return float64(s.Running) }},
	{"switchyard_engine_waiting_requests", "Requests queued in the engine, not yet admitted.", false, func(s EngineSnapshot) float64 { return float64(s.Waiting) }},
	{"switchyard_engine_kv_blocks_used", "KV cache blocks in use by running requests.", false, func(s EngineSnapshot) float64 { return float64(s.KVBlocksUsed) }},
	{"switchyard_engine_kv_blocks_total", "KV cache blocks the engine has.", false, func(s EngineSnapshot) float64 { return float64(s.KVBlocksTotal) }},
	{"switchyard_engine_kv_usage_ratio", "Fraction of the KV cache in use (0..1).", false, func(s EngineSnapshot) float64 {
		if s.KVBlocksTotal == 0 {
			return 0
		}
		return float64(s.KVBlocksUsed) / float64(s.KVBlocksTotal)
	}},
	{"switchyard_engine_prefix_cache_queried_blocks_total", "Prompt blocks looked up in the prefix cache.", true, func(s EngineSnapshot) float64 { return float64(s.PrefixQueriedBlocks) }},
	{"switchyard_engine_prefix_cache_hit_blocks_total", "Prompt blocks found in the prefix cache; the hit rate is its rate over the queried one.", true, func(s EngineSnapshot) float64 { return float64(s.PrefixHitBlocks) }},
	{"switchyard_engine_preemptions_total", "Running requests preempted for lack of KV blocks.", true, func(s EngineSnapshot) float64 { return float64(s.Preemptions) }},
	{"switchyard_engine_prompt_tokens_total", "Prompt tokens computed (prefilled).", true, func(s EngineSnapshot) float64 { return float64(s.PromptTokens) }},
	{"switchyard_engine_generated_tokens_total", "Tokens generated; tokens per second is its rate.", true, func(s EngineSnapshot) float64 { return float64(s.GeneratedTokens) }},
}

// NewEngineCollector exports the switchyard_engine_* metrics from read,
// called once per scrape; it must be safe for concurrent use.
func NewEngineCollector(read func() EngineSnapshot) prometheus.Collector {
	c := &engineCollector{read: read, descs: map[string]*prometheus.Desc{}}
	for _, m := range engineMetrics {
		c.descs[m.name] = prometheus.NewDesc(m.name, m.help, nil, nil)
	}
	return c
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	for _, m := range engineMetrics {
		t := prometheus.GaugeValue
		if m.counter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(c.descs[m.name], t, m.value(s))
	}
}
