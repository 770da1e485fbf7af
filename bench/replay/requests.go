package replay

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"
)

// RecordedRun is one replay's request records (RunRecorded), by the mode
// and rate scale it ran at.
type RecordedRun struct {
	Mode      string
	RateScale float64
	Requests  []RequestRecord
}

// RecordRuns replays each result's mode at its rate scale again, recording
// every request, at most parallel at once, in results' order. The runs are
// deterministic, so each one is the run that gave its result: a table's
// row can be taken apart request by request (router-replay-bench
// --requests-csv).
func RecordRuns(trace []Request, cfg Config, results []Result, parallel int) ([]RecordedRun, error) {
	runs := make([]RecordedRun, len(results))
	errs := make([]error, len(results))
	sem := make(chan struct{}, max(parallel, 1))
	done := make(chan struct{})
	for i, r := range results {
		go func() {
			sem <- struct{}{}
			c := cfg
			c.RateScale = r.RateScale
			var recs []RequestRecord
			_, recs, errs[i] = RunRecorded(trace, c, r.Mode)
			runs[i] = RecordedRun{Mode: r.Mode, RateScale: r.RateScale, Requests: recs}
			<-sem
			done <- struct{}{}
		}()
	}
	for range results {
		<-done
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("mode %s at rate x%g: %w", results[i].Mode, results[i].RateScale, err)
		}
	}
	return runs, nil
}

// RequestsCSVHeader are the columns of WriteRequestsCSV, one row per
// completed request of each run (see RequestRecord): times in ms, blocks
// of the engines' block size.
var RequestsCSVHeader = []string{"mode", "rate_scale", "request", "arrival_ms", "worker", "prompt_tokens",
	"overlap_blocks", "best_overlap_blocks", "cached_blocks", "queued_tokens", "decoding", "step_left_ms",
	"cost_ms", "wait_ms", "ttft_ms", "e2e_ms", "gaps", "slow_gaps", "gap_sum_ms", "home_worker", "home_cost_ms",
	"home_queued_tokens", "home_decoding", "decoding_min", "decoding_max", "slow_gaps_caused", "prefill_worker"}

// WriteRequestsCSV writes the runs' request records as CSV.
func WriteRequestsCSV(w io.Writer, runs []RecordedRun) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(RequestsCSVHeader)
	msOf := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	for _, run := range runs {
		rate := strconv.FormatFloat(run.RateScale, 'f', -1, 64)
		for _, r := range run.Requests {
			_ = cw.Write([]string{run.Mode, rate, strconv.Itoa(r.Request), msOf(r.Arrival), strconv.FormatUint(r.Worker, 10),
				strconv.Itoa(r.PromptTokens), strconv.Itoa(r.Overlap), strconv.Itoa(r.BestOverlap), strconv.Itoa(r.Cached),
				strconv.Itoa(r.QueuedTokens), strconv.Itoa(r.Decoding), msOf(r.StepLeft),
				strconv.FormatFloat(r.Cost, 'f', 3, 64), msOf(r.Wait), msOf(r.TTFT), msOf(r.E2E),
				strconv.Itoa(r.Gaps), strconv.Itoa(r.SlowGaps), msOf(r.GapSum), strconv.FormatUint(r.Home, 10),
				strconv.FormatFloat(r.HomeCost, 'f', 3, 64), strconv.Itoa(r.HomeQueuedTokens), strconv.Itoa(r.HomeDecoding),
				strconv.Itoa(r.DecodingMin), strconv.Itoa(r.DecodingMax), strconv.FormatFloat(r.SlowGapsCaused, 'f', 3, 64),
				strconv.FormatUint(r.PrefillWorker, 10)})
		}
	}
	cw.Flush()
	return cw.Error()
}
