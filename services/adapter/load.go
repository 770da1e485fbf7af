package adapter

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
)

// usageScale is kv_blocks_total when the engine does not report its number
// of GPU blocks: usage is then reported in thousandths.
const usageScale = 1000

// ParseLoad reads an engine's Prometheus text. vLLM: vllm:num_requests_waiting,
// vllm:num_requests_running, vllm:kv_cache_usage_perc (or the older
// vllm:gpu_cache_usage_perc) and num_gpu_blocks from vllm:cache_config_info.
// SGLang (--enable-metrics): sglang:num_queue_reqs, sglang:num_running_reqs
// and sglang:token_usage. Series of several label sets (data-parallel ranks)
// are summed; usage fractions are averaged.
func ParseLoad(r io.Reader) *workerv1.LoadMetrics {
	return ParseRankLoads(r, 1)[0]
}

// rankLoad sums one rank's series.
type rankLoad struct {
	waiting, running, usage float64
	usageN                  int
	total                   uint64
}

// ParseRankLoads reads an engine's Prometheus text as ParseLoad does, into
// a report per data-parallel rank (ranks reports, each with its dp_rank).
// vLLM labels every series of a rank's engine core with engine="<rank>";
// such a series counts to that rank (none, when the rank is ranks or more),
// a series without the label to rank 0. With one rank every series counts
// to it. A rank whose own cache_config_info is missing takes another
// rank's number of blocks (the ranks of one engine are sized alike).
func ParseRankLoads(r io.Reader, ranks int) []*workerv1.LoadMetrics {
	ranks = max(ranks, 1)
	acc := make([]rankLoad, ranks)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, rest := line, "", ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
			if line[i] == '{' {
				j := strings.LastIndexByte(line, '}')
				if j < i {
					continue
				}
				labels, rest = line[i+1:j], line[j+1:]
			}
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(v) {
			continue
		}
		rank := 0
		if ranks > 1 {
			if e, ok := label(labels, "engine"); ok {
				n, err := strconv.Atoi(e)
				if err != nil || n < 0 || n >= ranks {
					continue
				}
				rank = n
			}
		}
		a := &acc[rank]
		switch name {
		case "vllm:num_requests_waiting", "sglang:num_queue_reqs":
			a.waiting += v
		case "vllm:num_requests_running", "sglang:num_running_reqs":
			a.running += v
		case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage":
			a.usage += v
			a.usageN++
		case "vllm:cache_config_info":
			if b, ok := label(labels, "num_gpu_blocks"); ok {
				if n, err := strconv.ParseUint(b, 10, 64); err == nil {
					a.total = n
				}
			}
		}
	}
	var anyTotal uint64
	for _, a := range acc {
		if a.total > 0 {
			anyTotal = a.total
			break
		}
	}
	out := make([]*workerv1.LoadMetrics, ranks)
	now := timestamppb.Now()
	for i, a := range acc {
		usage := a.usage
		if a.usageN > 0 {
			usage /= float64(a.usageN)
		}
		usage = math.Min(math.Max(usage, 0), 1)
		total := a.total
		if total == 0 {
			total = anyTotal
		}
		if total == 0 {
			total = usageScale
		}
		// The engine's metrics give no step times to fit a model to, so the
		// adapter publishes the documented default (vLLM on an H100), which
		// the router would assume anyway; what matters most to the router is
		// the ratio of prefill to decode time, which holds across GPUs
		// roughly.
		out[i] = &workerv1.LoadMetrics{DpRank: uint32(i), WaitingRequests: uint32(a.waiting), RunningRequests: uint32(a.running),
			KvBlocksTotal: total, KvBlocksUsed: uint64(math.Round(usage * float64(total))), Timestamp: now,
			TimingModel: timingmodel.Default().Proto()}
	}
	return out
}

// label is the value of the label named key in a series' label list
// (key="value",...), unquoted.
func label(labels, key string) (string, bool) {
	for _, kv := range strings.Split(labels, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.Trim(strings.TrimSpace(val), `"`), true
		}
	}
	return "", false
}

// scrapeLoad stores the engine's load, a report per rank of its ranks,
// every interval until ctx ends.
func scrapeLoad(ctx context.Context, client *http.Client, url string, ranks int, interval time.Duration, load *atomic.Pointer[[]*workerv1.LoadMetrics], log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		rctx, cancel := context.WithTimeout(ctx, interval)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = client.Do(req); err == nil {
				if resp.StatusCode == http.StatusOK {
					m := ParseRankLoads(resp.Body, ranks)
					load.Store(&m)
				}
				resp.Body.Close()
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil && !failing {
			log.Warn("engine metrics not scraped", "url", url, "err", err.Error())
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
