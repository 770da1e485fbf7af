package replay

import (
	"bytes"
	"encoding/csv"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

// longTrace is the start of a long-context trace: prompts of 3,000 to
// 12,000 tokens, answers of 300 to 1,000.
func longTrace(t *testing.T, n int) []Request {
	t.Helper()
	g := Presets["long-context"]
	g.Requests = n
	trace, err := Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	return trace
}

// TestDisaggModes replays long prompts in the disaggregated modes and
// checks what the simulation is bound to give, not timings: every request
// completes; disagg-always prefills every one on a prefill worker; at a
// rate low enough that the decode workers are idle when each request
// comes (arrivals a minute apart), auto keeps every prefill local (a
// remote one costs the same prefill plus the transfer, and no decoding
// request waits for a local one); the pools are the split asked for; the
// aggregated modes report no pools.
func TestDisaggModes(t *testing.T) {
	n := 40
	if testing.Short() {
		n = 20 // make test: the race detector on a shared machine
	}
	trace := longTrace(t, n)
	tests := []struct {
		name            string
		mode            string
		rate            float64
		prefill, decode int // the config's
		wantP, wantD    int
		remote          func(float64) bool
		// spaced, when set, puts the requests this far apart (at rate
		// scale 1) instead of at the trace's arrivals.
		spaced time.Duration
	}{
		{name: "always, 2+2", mode: "disagg-always", rate: 4, prefill: 2, decode: 2, wantP: 2, wantD: 2, remote: func(x float64) bool { return x == 1 }},
		{name: "always, 1+3 from the decode pool's size", mode: "disagg-always", rate: 4, decode: 3, wantP: 1, wantD: 3, remote: func(x float64) bool { return x == 1 }},
		{name: "auto at a trickle: every prefill local", mode: "disagg", rate: 1, spaced: time.Minute, prefill: 3, wantP: 3, wantD: 1, remote: func(x float64) bool { return x == 0 }},
		{name: "auto, halves by default", mode: "disagg", rate: 4, wantP: 2, wantD: 2, remote: func(x float64) bool { return x >= 0 && x <= 1 }},
		{name: "auto behind 3 synced routers", mode: "disagg-3-replicas", rate: 4, prefill: 2, decode: 2, wantP: 2, wantD: 2,
			remote: func(x float64) bool { return x >= 0 && x <= 1 }},
		{name: "kv is aggregated", mode: "kv", rate: 4, prefill: 2, decode: 2, remote: func(x float64) bool { return x == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.RateScale, cfg.PrefillWorkers, cfg.DecodeWorkers = tt.rate, tt.prefill, tt.decode
			cfg.KVTransferGbps, cfg.KVBytesPerToken = 100, 114688
			trace := trace
			if tt.spaced > 0 {
				trace = slices.Clone(trace)
				for i := range trace {
					trace[i].Arrival = time.Duration(i) * tt.spaced
				}
			}
			r, err := Run(trace, cfg, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			if r.Completed != len(trace) || r.Rejected != 0 {
				t.Fatalf("%d completed, %d rejected (%s), want all %d", r.Completed, r.Rejected, r.LastReject, len(trace))
			}
			if r.PrefillWorkers != tt.wantP || r.DecodeWorkers != tt.wantD {
				t.Errorf("pools %d+%d, want %d+%d", r.PrefillWorkers, r.DecodeWorkers, tt.wantP, tt.wantD)
			}
			if !tt.remote(r.RemotePrefill) {
				t.Errorf("remote prefill share %.3f", r.RemotePrefill)
			}
			if r.HitRate < 0 || r.HitRate > 1 || r.ITL[1] <= 0 || r.ITL[0] > r.ITL[1] || r.ITL[1] > r.ITL[2] || r.TTFT[1] <= 0 {
				t.Errorf("hit rate %.3f, ITL %v, TTFT %v", r.HitRate, r.ITL, r.TTFT)
			}
			// Every answer's tokens once: the relayed first token is not
			// counted twice.
			want := 0
			for _, q := range trace {
				want += q.OutputLength
			}
			if got := int(r.Throughput*r.Makespan.Seconds() + 0.5); got < want-1 || got > want+1 {
				t.Errorf("%d tokens generated, want %d", got, want)
			}
		})
	}
}

// TestDisaggDeterministic: a disaggregated replay is as repeatable as the
// others.
func TestDisaggDeterministic(t *testing.T) {
	trace := longTrace(t, 30)
	cfg := smallConfig()
	cfg.KVTransferGbps, cfg.KVBytesPerToken = 100, 114688
	a, err := Run(trace, cfg, "disagg")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(trace, cfg, "disagg")
	if err != nil {
		t.Fatal(err)
	}
	a.Wall, b.Wall = 0, 0
	if a != b {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

// TestDisaggTransfer: the transfer takes blocks x block size x bytes per
// token x 8 / Gb/s, free without a link size; a slower link delays every
// pair's first token (virtual time), and prefill engines whose blocks are
// all held for slow transfers wait for a release instead of stalling.
func TestDisaggTransfer(t *testing.T) {
	cfg := smallConfig()
	cfg.KVTransferGbps, cfg.KVBytesPerToken = 100, 114688
	// 469 blocks of 16 tokens x 114,688 bytes x 8 bits / 100 Gb/s.
	if got, want := cfg.transferTime(469), time.Duration(469*16*114688*8*10)*time.Nanosecond/1000; got != want {
		t.Errorf("transferTime(469) = %v, want %v", got, want)
	}
	for _, c := range []Config{{KVTransferGbps: 0, KVBytesPerToken: 1}, {KVTransferGbps: 1, KVBytesPerToken: 0}} {
		c.Engine = cfg.Engine
		if d := c.transferTime(100); d != 0 {
			t.Errorf("%+v: transfer %v, want free", c, d)
		}
	}
	if d := cfg.transferTime(0); d != 0 {
		t.Errorf("no block: transfer %v", d)
	}

	// One request at a time: the first token comes after the prompt's
	// prefill, its transfer and the decode engine's first step.
	trace := longTrace(t, 24)
	ttft := map[float64]time.Duration{}
	for _, gbps := range []float64{400, 25, 1} {
		c := cfg
		c.KVTransferGbps, c.RateScale = gbps, 0.01
		r, err := Run(trace, c, "disagg-always")
		if err != nil {
			t.Fatal(err)
		}
		ttft[gbps] = r.TTFTMean
	}
	if !(ttft[400] < ttft[25] && ttft[25] < ttft[1]) {
		t.Errorf("mean TTFT by link %v: want slower links later", ttft)
	}
	// Room for about 4 prompts per engine: at 0.5 Gb/s a transfer takes
	// seconds, and the prefill engines run out of blocks to hold.
	c := cfg
	c.KVTransferGbps, c.RateScale, c.Engine.NumGPUBlocks = 0.5, 2, 2048
	r, err := Run(trace, c, "disagg-always")
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed != len(trace) {
		t.Fatalf("%d of %d completed (%s)", r.Completed, len(trace), r.LastReject)
	}
}

// TestDisaggConfigErrors: the pools come out of --workers.
func TestDisaggConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*Config)
		mode  string
		inErr string
	}{
		{"pools not adding up", func(c *Config) { c.PrefillWorkers, c.DecodeWorkers = 2, 3 }, "disagg", "must be the 4 engines"},
		{"negative pool", func(c *Config) { c.DecodeWorkers = -1 }, "disagg", "must not be negative"},
		{"no decode pool left", func(c *Config) { c.PrefillWorkers = 4 }, "disagg-always", "leave no engine"},
		{"no prefill pool left", func(c *Config) { c.DecodeWorkers = 5 }, "disagg", "leave no engine"},
		{"one engine", func(c *Config) { c.Workers = 1 }, "disagg", "at least 2 workers"},
		{"negative link", func(c *Config) { c.KVTransferGbps = -1 }, "kv", "kv-transfer-gbps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := smallConfig()
			tt.mod(&c)
			_, err := Run([]Request{{InputLength: 1, OutputLength: 1, HashIDs: []uint64{1}}}, c, tt.mode)
			if err == nil || !strings.Contains(err.Error(), tt.inErr) {
				t.Fatalf("err %v, want one saying %q", err, tt.inErr)
			}
		})
	}
}

// TestITLObjective: goodput is the highest rate meeting both objectives.
func TestITLObjective(t *testing.T) {
	res := func(rate float64, ttft, itl time.Duration) Result {
		return Result{Mode: "m", RateScale: rate, TTFT: [3]time.Duration{0, ttft, 0}, ITL: [3]time.Duration{0, itl, 0}}
	}
	results := []Result{res(2, time.Second, 20*time.Millisecond), res(4, time.Second, 60*time.Millisecond), res(6, 3*time.Second, 20*time.Millisecond)}
	tests := []struct {
		name       string
		slo        Objectives
		pass, fail float64
	}{
		{"TTFT only", Objectives{TTFT: 2 * time.Second}, 4, 6},
		{"both", Objectives{TTFT: 2 * time.Second, ITL: 50 * time.Millisecond}, 2, 4},
		{"a loose ITL", Objectives{TTFT: 2 * time.Second, ITL: time.Second}, 4, 6},
		{"neither", Objectives{TTFT: time.Millisecond, ITL: time.Millisecond}, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if pass, fail := bracket(results, "m", tt.slo); pass != tt.pass || fail != tt.fail {
				t.Fatalf("bracket %g, %g; want %g, %g", pass, fail, tt.pass, tt.fail)
			}
		})
	}
	rep := &Report{SLO: 2 * time.Second, SLOITL: 50 * time.Millisecond, Results: results}
	if g := rep.Goodput("m"); g != 2 {
		t.Fatalf("report goodput x%g, want x2", g)
	}
}

// TestDisaggCSV: the disaggregated rows carry their pools, every row its
// ITL p90, under the contract's column names.
func TestDisaggCSV(t *testing.T) {
	trace := longTrace(t, 16)
	cfg := smallConfig()
	cfg.PrefillWorkers, cfg.KVTransferGbps, cfg.KVBytesPerToken = 1, 100, 114688
	results, err := RunAll(trace, cfg, []string{"kv", "disagg", "disagg-always"}, []float64{4}, 2)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Trace: "long", Requests: len(trace), Config: cfg, Bounds: ComputeBounds(trace, cfg), SLO: 2 * time.Second, SLOITL: 50 * time.Millisecond, Results: results}
	var buf, table bytes.Buffer
	if err := WriteCSV(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "ITL p90 <= 50ms") || !strings.Contains(table.String(), "1+3") {
		t.Errorf("table lacks the ITL objective or the pools:\n%s", table.String())
	}
	split := rep.Bounds.Capacity.Split(cfg.Engine.Timing(), 1, 3)
	if want := "split capacity bound at 1+3: x" + fmtRate(split.Always) + " "; !strings.Contains(table.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, table.String())
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string) int {
		i := slices.Index(rows[0], name)
		if i < 0 {
			t.Fatalf("CSV lacks column %s: %v", name, rows[0])
		}
		return i
	}
	itl, p, d, mode := col("itl_p90_ms"), col("prefill_workers"), col("decode_workers"), col("mode")
	want := map[string][2]string{"kv": {"0", "0"}, "disagg": {"1", "3"}, "disagg-always": {"1", "3"}}
	for i, row := range rows[1:] {
		if w := want[row[mode]]; row[p] != w[0] || row[d] != w[1] {
			t.Errorf("%s: pools %s+%s, want %s+%s", row[mode], row[p], row[d], w[0], w[1])
		}
		if row[itl] != ms(results[i].ITL[1]) || row[itl] == "0.0" {
			t.Errorf("%s: itl_p90_ms %s, result %v", row[mode], row[itl], results[i].ITL)
		}
	}
}

// TestSLOITLFlag: --slo-itl-p90 takes milliseconds or a duration.
func TestSLOITLFlag(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{in: "50", want: 50 * time.Millisecond},
		{in: "12.5", want: 12500 * time.Microsecond},
		{in: "80ms", want: 80 * time.Millisecond},
		{in: "0.1s", want: 100 * time.Millisecond},
		{in: "fast", err: true},
		{in: "NaN", err: true},
		{in: "1e300", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var c CommandConfig
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			c.RegisterFlags(fs)
			if time.Duration(c.SLOITL) != 50*time.Millisecond {
				t.Fatalf("default %v, want 50ms", time.Duration(c.SLOITL))
			}
			err := fs.Parse([]string{"--slo-itl-p90", tt.in})
			if (err != nil) != tt.err || !tt.err && time.Duration(c.SLOITL) != tt.want {
				t.Fatalf("err %v, value %v; want %v (error %v)", err, time.Duration(c.SLOITL), tt.want, tt.err)
			}
		})
	}
}

// TestLongContextPreset: prompts of 3,000 to 12,000 tokens, answers of 300
// to 1,000.
func TestLongContextPreset(t *testing.T) {
	trace := longTrace(t, 2000)
	for i, r := range trace {
		if r.InputLength < 3000 || r.InputLength > 12000 || r.OutputLength < 300 || r.OutputLength > 1000 {
			t.Fatalf("request %d: %d prompt tokens, %d output", i, r.InputLength, r.OutputLength)
		}
	}
}
