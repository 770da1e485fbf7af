package adapter

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestParseRankLoads splits an engine's metrics by vLLM's engine label into
// a report per data-parallel rank.
func TestParseRankLoads(t *testing.T) {
	const twoEngines = `vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2048"} 1.0
`
	for _, tc := range []struct {
		name, text string
		ranks      int
		want       []string // per rank: dp_rank waiting running used total
	}{
		{"one rank sums the engines", twoEngines, 1, []string{"0 4 2 1024 2048"}},
		{"zero ranks is one", twoEngines, 0, []string{"0 4 2 1024 2048"}},
		{"a report per engine; rank 1 sized like rank 0", twoEngines, 2, []string{"0 3 0 512 2048", "1 1 2 1536 2048"}},
		{"a rank without series is idle", twoEngines, 3, []string{"0 3 0 512 2048", "1 1 2 1536 2048", "2 0 0 0 2048"}},
		{"unlabelled series count to rank 0", "vllm:num_requests_waiting 5\nvllm:gpu_cache_usage_perc 0.5\n", 2,
			[]string{"0 5 0 500 1000", "1 0 0 0 1000"}},
		{"engines past the ranks and bad labels are dropped", `vllm:num_requests_waiting{engine="2"} 9
vllm:num_requests_waiting{engine="x"} 9
vllm:num_requests_waiting{engine="-1"} 9
vllm:num_requests_waiting{engine="1"} 1
`, 2, []string{"0 0 0 0 1000", "1 1 0 0 1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseRankLoads(strings.NewReader(tc.text), tc.ranks)
			if len(got) != len(tc.want) {
				t.Fatalf("%d reports, want %d", len(got), len(tc.want))
			}
			for i, m := range got {
				if s := fmt.Sprint(m.DpRank, m.WaitingRequests, m.RunningRequests, m.KvBlocksUsed, m.KvBlocksTotal); s != tc.want[i] {
					t.Errorf("rank %d: %s, want %s", i, s, tc.want[i])
				}
			}
		})
	}
}

// TestRankHeader: the engine is told the rank only when it serves several;
// a rank past them is refused.
func TestRankHeader(t *testing.T) {
	for _, tc := range []struct {
		ranks   dpRanks
		rank    uint32
		header  string // "" none
		refused bool
	}{
		{0, 0, "", false},
		{1, 0, "", false},
		{1, 1, "", true},
		{2, 0, "0", false},
		{2, 1, "1", false},
		{2, 2, "", true},
		{1024, 1023, "1023", false},
	} {
		t.Run(fmt.Sprint(tc.ranks, "/", tc.rank), func(t *testing.T) {
			err := tc.ranks.check(tc.rank)
			if refused := err != nil; refused != tc.refused {
				t.Fatalf("check: %v, want refused %v", err, tc.refused)
			}
			if err != nil {
				if he, ok := err.(*transport.HandlerError); !ok || he.Code != transport.CodeInvalidArgument {
					t.Fatalf("error %v, want invalid_argument", err)
				}
				return
			}
			h, _ := http.NewRequest(http.MethodPost, "http://engine/v1/completions", nil)
			tc.ranks.set(h, tc.rank)
			if got := h.Header.Get(RankHeader); got != tc.header {
				t.Fatalf("header %q, want %q", got, tc.header)
			}
		})
	}
}
