package planner_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/cli"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/simengine"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/timingmodel"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/planner"
	"github.com/switchyard-llm/switchyard/services/planner/core"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// workerEnv makes this test binary a mocker process: the local
// connector's worker command in the live test.
const workerEnv = "SWITCHYARD_PLANNER_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		var cfg mocker.Config
		opts := cli.Options{Name: "mocker", EnvPrefix: "SWITCHYARD_MOCKER_", Env: mocker.EnvVars}
		os.Exit(cli.Main(opts, &cfg, os.Args[1:], os.Stderr, func(ctx context.Context, log *slog.Logger) error {
			return mocker.Run(ctx, cfg, log, nil)
		}))
	}
	testleak.VerifyTestMain(m)
}

// The live run's settings: mockers 10 times slower than the timing
// model's H100 that run 4 requests at once (published with their timing
// model), so that a worker holds a few requests a second within the
// objectives and a test client's few requests a second load them.
const (
	speedup   = 0.1
	maxSeqs   = 4
	maxTokens = 20
	ttftSLO   = 2000.0
	itlSLO    = 100.0
	// decideWithin bounds the planner's reaction: the decision that asks
	// for a phase's pool comes within this (20 intervals) of the rate's
	// step.
	decideWithin = 20 * time.Second
	// startupBound bounds a started worker's start-up: a process of this
	// test binary that loads the built-in tokenizer (a second, ten under
	// the race detector, and several times that on a loaded machine, as
	// in the other tests that load it) and registers.
	startupBound = 3 * time.Minute
)

// TestLocalConnectorScalesWithDemand runs a stack with one mocker and the
// planner with the local connector (which starts mockers as processes of
// this test binary), steps a client's request rate up to what three
// workers hold and back down to what one holds, and checks that the pool
// grows to its bound of 3 and shrinks back to 1 without a failed request:
// the workers that go are drained (deregistered, then they finish what
// they run). It logs the timeline: rate, workers, TTFT p90, failures.
func TestLocalConnectorScalesWithDemand(t *testing.T) {
	// A request of the step waits in the frontend's admission queue until
	// the started workers serve, which takes them their start-up
	// (startupBound): it is shed only past that, not for the machine's
	// pace.
	st := stacktest.Start(t, stacktest.Options{Mockers: 1, MockerArgs: []string{"--speedup-ratio", fmt.Sprint(speedup), "--max-num-seqs", fmt.Sprint(maxSeqs)},
		FrontendArgs: []string{"--queue-timeout", startupBound.String()}})
	t.Setenv(workerEnv, "1")
	logDir := t.TempDir()
	var cfg planner.Config
	fs := flag.NewFlagSet("planner", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	workerArgs := strings.Join([]string{"--namespace", "dynamo", "--registry-addr", st.RegistryAddr, "--eventbus-addr", st.EventbusAddr,
		"--speedup-ratio", fmt.Sprint(speedup), "--max-num-seqs", fmt.Sprint(maxSeqs), "--drain-timeout", "60s"}, " ")
	if err := fs.Parse([]string{"--grpc-addr", "127.0.0.1:0", "--metrics-addr", "", "--status-addr", "127.0.0.1:0",
		"--registry-addr", st.RegistryAddr, "--eventbus-addr", st.EventbusAddr, "--connector", "local",
		"--worker-command", os.Args[0], "--worker-args", workerArgs, "--worker-log-dir", logDir,
		"--min-replicas", "1", "--max-replicas", "3", "--adjustment-interval", "1s",
		// Sized for the forecast alone: the test checks that the local
		// connector carries decisions out, at 1 s intervals to stay
		// short; on three 1 s samples of ~1.3 req/s the level's 95th
		// percentile is above what one worker holds with the hysteresis
		// free, and the pool would rightly stay at 2.
		"--demand-quantile", "0.5",
		"--ttft-slo", fmt.Sprint(ttftSLO), "--itl-slo", fmt.Sprint(itlSLO)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := planner.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("planner: %v", err)
		}
	})

	// One request tells the prompt's size after the chat template; from it
	// and the objectives, the rates one and three workers hold.
	prompt := warmUp(t, st.FrontendURL)
	model := timingmodel.Default().Scaled(speedup)
	model.MaxRunning = maxSeqs
	engine := simengine.DefaultConfig()
	eng := core.Engine{Model: model, KVBlocks: engine.NumGPUBlocks, BlockSize: engine.BlockSize}
	capRPS, _ := eng.Capacity(core.Agg, float64(prompt), 0, maxTokens, core.Objectives{TTFTMs: ttftSLO, ITLMs: itlSLO})
	if !(capRPS > 0) {
		t.Fatalf("a worker holds no load within the objectives (prompt %d tokens)", prompt)
	}
	low, high := 0.5*capRPS, 2.4*capRPS // one worker, three

	dc, err := registryclient.Dial([]string{st.RegistryAddr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	workers := func() int {
		r, err := dc.Raw().ListInstances(context.Background(), &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: "dynamo"}})
		if err != nil {
			t.Fatalf("ListInstances: %v", err)
		}
		return len(r.Instances)
	}

	c := &client{url: st.FrontendURL}
	long := !testing.Short()
	hold := 3 * time.Second
	if long {
		hold = 30 * time.Second
	}
	type phase struct {
		name  string
		rate  float64
		until int // workers to wait for, bounded by decideWithin and startupBound
	}
	phases := []phase{{"low", low, 1}, {"step up", high, 3}, {"step down", low, 1}}
	if long {
		phases = append(phases, phase{"step up again", high, 3}, phase{"step down again", low, 1})
	}
	most := 0
	var reached []bool
	// The decisions as they come (the service keeps the last few only).
	var decided []core.Decision
	keep := func() {
		for _, d := range svc.Decisions() {
			if len(decided) == 0 || d.ID > decided[len(decided)-1].ID {
				decided = append(decided, d)
			}
		}
	}
	start := time.Now()
	began := make([]time.Time, len(phases))
	from := make([]int, len(phases)) // the pool's size at the phase's start
	for i, ph := range phases {
		stop := c.run(ph.rate)
		began[i] = time.Now()
		from[i] = workers()
		deadline, heldSince := time.Now().Add(decideWithin+startupBound), time.Time{}
		got := false
		for time.Now().Before(deadline) {
			n := workers()
			most = max(most, n)
			sent, failed, p90 := c.window()
			t.Logf("t=%5.1fs %-15s rate %5.2f/s  workers %d  sent %3d  failed %d  TTFT p90 %6.0f ms", time.Since(start).Seconds(), ph.name, ph.rate, n, sent, failed, p90)
			if n == ph.until && !got {
				got, heldSince = true, time.Now()
			}
			if got && time.Since(heldSince) >= hold {
				break
			}
			keep()
			time.Sleep(time.Second)
		}
		stop()
		reached = append(reached, got)
	}
	sent, failed := c.sent.Load(), c.failed.Load()
	t.Logf("requests: %d sent, %d failed; most workers %d; capacity %.2f req/s a worker (prompt %d tokens); rates %.2f and %.2f req/s", sent, failed, most, capRPS, prompt, low, high)
	for i, ph := range phases {
		if !reached[i] {
			t.Errorf("phase %q: the pool never reached %d workers within %v", ph.name, ph.until, decideWithin+startupBound)
		}
		if ph.until <= from[i] {
			continue // a shrink waits out the planner's cooldown and hysteresis: bounded above only
		}
		// The planner's part of a growth: the decision that asked for the
		// phase's pool, within a few intervals of the step.
		asked := time.Duration(-1)
		for _, d := range decided {
			if !d.At.Before(began[i]) && len(d.Pools) > 0 && d.Pools[0].Target == ph.until {
				asked = d.At.Sub(began[i])
				break
			}
		}
		if asked < 0 || asked > decideWithin {
			t.Errorf("phase %q: the decision for %d workers came %v after the step (-1s: none), want within %v", ph.name, ph.until, asked, decideWithin)
		}
	}
	if most > 3 {
		t.Errorf("the pool grew to %d workers past --max-replicas 3", most)
	}
	if failed != 0 || sent == 0 {
		t.Errorf("%d of %d requests failed; want 0 of some; the first: %q", failed, sent, c.why)
	}
	keep()
	logTimeline(t, start, decided, logDir)
	// The decisions are in the registry and on the status endpoint.
	ds := svc.Decisions()
	if len(ds) == 0 || !slices.IsSortedFunc(ds, func(a, b core.Decision) int { return int(a.ID) - int(b.ID) }) {
		t.Fatalf("decisions %v", ds)
	}
	r, err := dc.Raw().GetKey(context.Background(), &registryv1.GetKeyRequest{Bucket: planner.Bucket, Key: planner.DecisionKey})
	if err != nil {
		t.Fatalf("the last decision in the registry: %v", err)
	}
	last, err := core.DecodeDecision(r.GetKv().GetValue())
	if err != nil || last.ID < ds[len(ds)-1].ID {
		t.Fatalf("registry's last decision %d (%v), the service's %d", last.ID, err, ds[len(ds)-1].ID)
	}
	resp, err := http.Get("http://" + svc.StatusAddr().String() + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s planner.Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.Connector != "local" || len(s.Decisions) == 0 {
		t.Fatalf("status.json: %+v, %v", s, err)
	}
}

// logTimeline logs when the pool's size was decided
// and when each started worker's process logged its start and its
// registration (from its log under logDir), since start: whether the
// planner decided late or the workers came late.
func logTimeline(t *testing.T, start time.Time, ds []core.Decision, logDir string) {
	t.Helper()
	for _, d := range ds {
		for _, p := range d.Pools {
			if p.Target != p.Current {
				t.Logf("decision %d at t=%5.1fs: %d -> %d (%d registered, %d starting): %s", d.ID, d.At.Sub(start).Seconds(), p.Current, p.Target,
					p.Inputs.Workers, p.Inputs.Starting, p.Reason)
			}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		var seen []string
		for _, line := range strings.Split(string(b), "\n") {
			var rec struct {
				Time time.Time `json:"time"`
				Msg  string    `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && (rec.Msg == "mocker starting" || rec.Msg == "worker registered" ||
				strings.Contains(rec.Msg, "shutting down")) {
				seen = append(seen, fmt.Sprintf("%s at t=%.1fs", rec.Msg, rec.Time.Sub(start).Seconds()))
			}
		}
		t.Logf("%s: %s", filepath.Base(name), strings.Join(seen, "; "))
	}
}

// warmUp sends one request and returns its prompt's tokens.
func warmUp(t *testing.T, url string) int {
	t.Helper()
	body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "hello planner"}], "max_tokens": %d}`, stacktest.Model, maxTokens)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil || out.Usage.PromptTokens == 0 {
		t.Fatalf("warm-up request: %s", resp.Status)
	}
	return out.Usage.PromptTokens
}

// client sends streamed chat requests at a rate and counts what fails: a
// status other than 200, a broken stream, an error event, no [DONE].
type client struct {
	url          string
	sent, failed atomic.Int64
	wg           sync.WaitGroup
	mu           sync.Mutex
	ttfts        []float64 // since the last window
	winSent      int
	winFailed    int
	// why holds the first failures' reasons, logged at the end.
	why []string
}

// run sends requests at rate per second until the returned stop is
// called; stop waits for the requests in flight.
func (c *client) run(rate float64) (stop func()) {
	done := make(chan struct{})
	var loop sync.WaitGroup
	loop.Add(1)
	go func() {
		defer loop.Done()
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c.wg.Add(1)
				go func() { defer c.wg.Done(); c.one() }()
			}
		}
	}()
	return func() {
		close(done)
		loop.Wait()
		c.wg.Wait()
	}
}

func (c *client) one() {
	c.sent.Add(1)
	begin := time.Now()
	ttft, why := c.stream()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.winSent++
	if why != "" {
		c.failed.Add(1)
		c.winFailed++
		if len(c.why) < 5 {
			c.why = append(c.why, fmt.Sprintf("%.1fs after sending: %s", time.Since(begin).Seconds(), why))
		}
		return
	}
	c.ttfts = append(c.ttfts, ttft.Sub(begin).Seconds()*1000)
}

// stream sends one streamed chat; why says how it failed ("" when it did
// not).
func (c *client) stream() (first time.Time, why string) {
	body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "hello planner"}], "max_tokens": %d, "stream": true}`, stacktest.Model, maxTokens)
	ctx, cancel := context.WithTimeout(context.Background(), startupBound+time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return first, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return first, fmt.Sprintf("%s (Retry-After %q): %s", resp.Status, resp.Header.Get("Retry-After"), b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			if first.IsZero() {
				return first, "done without a token"
			}
			return first, ""
		}
		if strings.Contains(data, `"error"`) {
			return first, "error event: " + data
		}
		if first.IsZero() {
			first = time.Now()
		}
	}
	if err := sc.Err(); err != nil {
		return first, "stream: " + err.Error()
	}
	return first, "stream ended without [DONE]"
}

// window returns what was sent and failed since the last call, and the
// TTFT p90 of the requests that finished meanwhile (0 without any).
func (c *client) window() (sent, failed int, p90 float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent, failed = c.winSent, c.winFailed
	c.winSent, c.winFailed = 0, 0
	if len(c.ttfts) > 0 {
		slices.Sort(c.ttfts)
		p90 = c.ttfts[int(math.Ceil(0.9*float64(len(c.ttfts))))-1]
	}
	c.ttfts = c.ttfts[:0]
	return sent, failed, p90
}
