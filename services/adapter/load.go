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
	var waiting, running, usage float64
	var usageN int
	var total uint64
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
		switch name {
		case "vllm:num_requests_waiting", "sglang:num_queue_reqs":
			waiting += v
		case "vllm:num_requests_running", "sglang:num_running_reqs":
			running += v
		case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage":
			usage += v
			usageN++
		case "vllm:cache_config_info":
			for _, kv := range strings.Split(labels, ",") {
				k, val, ok := strings.Cut(kv, "=")
				if ok && strings.TrimSpace(k) == "num_gpu_blocks" {
					if n, err := strconv.ParseUint(strings.Trim(val, `"`), 10, 64); err == nil {
						total = n
					}
				}
			}
		}
	}
	if usageN > 0 {
		usage /= float64(usageN)
	}
	usage = math.Min(math.Max(usage, 0), 1)
	if total == 0 {
		total = usageScale
	}
	// The engine's metrics give no step times to fit a model to, so the
	// adapter publishes the documented default (vLLM on an H100), which the
	// router would assume anyway; what matters most to the router is the
	// ratio of prefill to decode time, which holds across GPUs roughly.
	return &workerv1.LoadMetrics{WaitingRequests: uint32(waiting), RunningRequests: uint32(running),
		KvBlocksTotal: total, KvBlocksUsed: uint64(math.Round(usage * float64(total))), Timestamp: timestamppb.Now(),
		TimingModel: timingmodel.Default().Proto()}
}

// scrapeLoad stores the engine's load every interval until ctx ends.
func scrapeLoad(ctx context.Context, client *http.Client, url string, interval time.Duration, load *atomic.Pointer[workerv1.LoadMetrics], log *slog.Logger) {
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
					load.Store(ParseLoad(resp.Body))
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
