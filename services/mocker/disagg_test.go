package mocker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/simengine/realtime"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/mocker"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// handoffEnd is one OnHandoffEnd call.
type handoffEnd struct {
	id     string
	end    realtime.HandoffEnd
	blocks int
}

// disaggMocker is a mocker of a disaggregated test stack, its worker and
// what it reports.
type disaggMocker struct {
	*runningMocker
	w       *worker.Worker
	metrics string // its /metrics address
	ends    chan handoffEnd
}

// disaggStack starts a registry and an eventbus for mockers of the legs.
type disaggStack struct{ reg, bus string }

func newDisaggStack(t *testing.T) disaggStack {
	t.Helper()
	_, reg := registrytest.Start(t)
	_, bus := eventbustest.Start(t)
	t.Setenv("DYN_TCP_RPC_HOST", "127.0.0.1")
	return disaggStack{reg: reg.Addr, bus: bus.Addr().String()}
}

// start runs a mocker of the mode (agg, prefill or decode) on component
// comp, with extra flags, and waits for its registration.
func (s disaggStack) start(t *testing.T, mode, comp string, extra ...string) *disaggMocker {
	t.Helper()
	addr := make(chan net.Addr, 1)
	m := &disaggMocker{ends: make(chan handoffEnd, 64)}
	args := append([]string{"--registry-addr", s.reg, "--eventbus-addr", s.bus, "--metrics-addr", "127.0.0.1:0",
		"--disaggregation-mode", mode, "--component", comp}, extra...)
	m.runningMocker = runMocker(t, func(c *mocker.Config) {
		c.OnMetricsAddr = func(a net.Addr) { addr <- a }
		c.OnHandoffEnd = func(id string, end realtime.HandoffEnd, blocks int) { m.ends <- handoffEnd{id, end, blocks} }
	}, args...)
	m.w = m.registered(t)
	m.metrics = (<-addr).String()
	return m
}

// metric reads one sample's value from the mocker's /metrics (the line
// that starts with name, labels included, then a space).
func (m *disaggMocker) metric(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + m.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return ""
}

// waitEnd waits for the mocker's next handoff end.
func (m *disaggMocker) waitEnd(t *testing.T) handoffEnd {
	t.Helper()
	select {
	case e := <-m.ends:
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("no handoff ended in 30 s")
		return handoffEnd{}
	}
}

// waitMetric waits, a bounded number of scrapes, for a sample to read want.
func (m *disaggMocker) waitMetric(t *testing.T, name, want string) {
	t.Helper()
	for range 3000 {
		if m.metric(t, name) == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s = %s after 30 s, want %s", name, m.metric(t, name), want)
}

// prefillLeg runs a prefill leg and checks its one answer; it returns the
// handoff.
func prefillLeg(ctx context.Context, t *testing.T, c transport.Client, p *disaggMocker, req *workerv1.GenerateRequest, holdMs uint32) *workerv1.KvHandoff {
	t.Helper()
	req = proto.Clone(req).(*workerv1.GenerateRequest)
	req.Leg = workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL
	rs, err := workertest.Generate(ctx, c, workertest.TCP(p.w.Instance()), req)
	if err != nil {
		t.Fatalf("prefill leg: %v", err)
	}
	if len(rs) != 1 {
		t.Fatalf("prefill leg answered %d responses, want 1", len(rs))
	}
	r := rs[0]
	h := r.GetHandoff()
	if len(r.TokenIds) != 0 || r.FinishReason != workerv1.FinishReason_FINISH_REASON_STOP || r.GetUsage().GetPromptTokens() != uint32(len(req.TokenIds)) ||
		r.GetUsage().GetCompletionTokens() != 0 {
		t.Fatalf("prefill leg answer %v; want no tokens, STOP and the prompt's usage", r)
	}
	if h.GetKind() != commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK || h.GetPrefillInstanceId() != p.w.InstanceID() || h.GetHoldMs() != holdMs || h.FirstTokenId == nil {
		t.Fatalf("handoff %v; want mock, instance %x, hold %d ms, a first token", h, p.w.InstanceID(), holdMs)
	}
	m, err := worker.DecodeMockHandoff(h)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint32((len(req.TokenIds) + 15) / 16); m.HandoffId != req.RequestId || m.Address != p.w.APIAddr() || m.Blocks != want {
		t.Fatalf("payload %v; want id %s, address %s, %d blocks", m, req.RequestId, p.w.APIAddr(), want)
	}
	return h
}

// decodeLeg sends the decode leg of req with the handoff.
func decodeLeg(ctx context.Context, t *testing.T, c transport.Client, d *disaggMocker, req *workerv1.GenerateRequest, h *workerv1.KvHandoff) ([]*workerv1.GenerateResponse, error) {
	t.Helper()
	req = proto.Clone(req).(*workerv1.GenerateRequest)
	req.Leg, req.Handoff = workerv1.DisaggregationLeg_DISAGGREGATION_LEG_DECODE, h
	return workertest.Generate(ctx, c, workertest.TCP(d.w.Instance()), req)
}

// waitBlocks waits until the worker's local index (what it published)
// holds every block.
func waitBlocks(t *testing.T, w *worker.Worker, blocks []kvhash.Block) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		_, changed := w.KVIndex().Last()
		have := map[uint64]bool{}
		for _, r := range w.KVIndex().State() {
			for _, h := range r.Hashes {
				have[h] = true
			}
		}
		missing := 0
		for _, b := range blocks {
			if !have[b.Sequence] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d of %d blocks not published after 30 s", missing, len(blocks))
		}
	}
}

// TestLegsGenerateTheWholeAnswer: over the request plane, a prefill leg on
// a prefill mocker then the decode leg on a decode mocker generate what the
// whole request generates on an aggregated one (the mocker is
// deterministic); the prefill mocker held the prompt's blocks until the
// pull (gauge, then pulled and 0); the decode mocker published the arrived
// blocks as stored and counts as cached only what it held before.
func TestLegsGenerateTheWholeAnswer(t *testing.T) {
	s := newDisaggStack(t)
	agg := s.start(t, "agg", "agg")
	p := s.start(t, "prefill", "prefill", "--handoff-timeout", "1h")
	d := s.start(t, "decode", "decode")
	c := tcpClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tests := []struct {
		name   string
		req    *workerv1.GenerateRequest
		cached uint32 // prompt tokens the decode worker caches before
	}{
		{"partial last block", &workerv1.GenerateRequest{TokenIds: seq(1000, 50), MaxTokens: 12}, 0},
		{"block-aligned prompt", &workerv1.GenerateRequest{TokenIds: seq(3000, 64), MaxTokens: 5}, 0},
		{"one token answer", &workerv1.GenerateRequest{TokenIds: seq(5000, 20), MaxTokens: 1}, 0},
		{"stop token", &workerv1.GenerateRequest{TokenIds: seq(7000, 33), MaxTokens: 40,
			Stop: &workerv1.StopConditions{StopTokenIds: []uint32{1000, 1001, 1002}}}, 0},
		// The decode worker served the first 48 tokens before: their 3
		// blocks do not move.
		{"decode worker caches a prefix", &workerv1.GenerateRequest{TokenIds: seq(9000, 70), MaxTokens: 8}, 48},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := proto.Clone(tt.req).(*workerv1.GenerateRequest)
			req.RequestId = fmt.Sprint("legs-", i)
			if tt.cached > 0 {
				warm := &workerv1.GenerateRequest{RequestId: req.RequestId + "-warm", TokenIds: req.TokenIds[:tt.cached], MaxTokens: 1}
				if _, err := workertest.Generate(ctx, c, workertest.TCP(d.w.Instance()), warm); err != nil {
					t.Fatal(err)
				}
			}
			whole, err := workertest.Generate(ctx, c, workertest.TCP(agg.w.Instance()), req)
			if err != nil {
				t.Fatal(err)
			}
			want, wantFin := workertest.Output(whole)

			h := prefillLeg(ctx, t, c, p, req, 3600_000)
			blocks := (len(req.TokenIds) + 15) / 16
			if got := p.metric(t, "switchyard_mocker_kv_handoff_held_blocks"); got != fmt.Sprint(blocks) {
				t.Fatalf("held blocks %s while the handoff waits, want %d", got, blocks)
			}
			rs, err := decodeLeg(ctx, t, c, d, req, h)
			if err != nil {
				t.Fatalf("decode leg: %v", err)
			}
			got, fin := workertest.Output(rs)
			if !slices.Equal(got, want) || fin != wantFin {
				t.Fatalf("legs generated %v (%v), the whole request %v (%v)", got, fin, want, wantFin)
			}
			if got[0] != h.GetFirstTokenId() {
				t.Fatalf("decode leg starts with %d, the handoff's first token is %d", got[0], h.GetFirstTokenId())
			}
			u := rs[len(rs)-1].GetUsage()
			if u.GetPromptTokens() != uint32(len(req.TokenIds)) || u.GetCompletionTokens() != uint32(len(want)) || u.GetCachedPromptTokens() != tt.cached {
				t.Fatalf("decode leg usage %v; want %d prompt, %d completion, %d cached", u, len(req.TokenIds), len(want), tt.cached)
			}
			if e := p.waitEnd(t); e != (handoffEnd{req.RequestId, realtime.HandoffPulled, blocks}) {
				t.Fatalf("handoff end %+v, want %s pulled %d", e, req.RequestId, blocks)
			}
			if got := p.metric(t, "switchyard_mocker_kv_handoff_held_blocks"); got != "0" {
				t.Fatalf("held blocks %s after the pull, want 0", got)
			}
			waitBlocks(t, d.w, kvhash.Hashes(req.TokenIds, 16, nil))
		})
	}
	if got := p.metric(t, `switchyard_mocker_kv_handoffs_ended_total{end="pulled"}`); got != fmt.Sprint(len(tests)) {
		t.Fatalf("pulled handoffs %s, want %d", got, len(tests))
	}
}

// TestDecodeLegPullsWhenAdmitted: a decode leg takes its KV from the
// prefill worker once its engine admits it, not before: on a decode mocker
// of one running slot, held by a long answer, the leg waits in the
// engine's queue and the prefill worker still holds its blocks; once the
// slot is free the leg is admitted, pulls (the handoff ends pulled) and
// generates from the relayed first token.
func TestDecodeLegPullsWhenAdmitted(t *testing.T) {
	s := newDisaggStack(t)
	p := s.start(t, "prefill", "prefill", "--handoff-timeout", "1h")
	// Five times slower than real time, so that the long answer holds the
	// slot until the test cancels it.
	d := s.start(t, "decode", "decode", "--max-num-seqs", "1", "--no-delay=false", "--speedup-ratio", "0.2")
	c := tcpClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	long, stopLong := context.WithCancel(ctx)
	defer stopLong()
	longDone := make(chan error, 1)
	go func() {
		_, err := workertest.Generate(long, c, workertest.TCP(d.w.Instance()),
			&workerv1.GenerateRequest{RequestId: "long", TokenIds: seq(100, 20), MaxTokens: 100000})
		longDone <- err
	}()
	d.waitMetric(t, "switchyard_engine_running_requests", "1")

	req := &workerv1.GenerateRequest{RequestId: "leg", TokenIds: seq(5000, 70), MaxTokens: 3}
	h := prefillLeg(ctx, t, c, p, req, 3600_000)
	type result struct {
		rs  []*workerv1.GenerateResponse
		err error
	}
	legDone := make(chan result, 1)
	go func() {
		rs, err := decodeLeg(ctx, t, c, d, req, h)
		legDone <- result{rs, err}
	}()
	d.waitMetric(t, "switchyard_engine_waiting_requests", "1")
	select {
	case e := <-p.ends:
		t.Fatalf("handoff ended %+v while its decode leg waits for a slot", e)
	default:
	}
	if got := p.metric(t, "switchyard_mocker_kv_handoff_held_blocks"); got != "5" {
		t.Fatalf("held blocks %s while the decode leg waits for a slot, want 5", got)
	}

	stopLong()
	if err := <-longDone; err == nil {
		t.Fatal("the long answer ended before it was cancelled")
	}
	if e := p.waitEnd(t); e != (handoffEnd{"leg", realtime.HandoffPulled, 5}) {
		t.Fatalf("handoff end %+v, want leg pulled 5", e)
	}
	r := <-legDone
	if r.err != nil {
		t.Fatalf("decode leg: %v", r.err)
	}
	got, _ := workertest.Output(r.rs)
	if len(got) != 3 || got[0] != h.GetFirstTokenId() {
		t.Fatalf("decode leg generated %v; want 3 tokens from the handoff's first, %d", got, h.GetFirstTokenId())
	}
	waitBlocks(t, d.w, kvhash.Hashes(req.TokenIds, 16, nil))
}

// TestHeldKVIsFreed: a handoff nobody pulls is freed by its timeout, its
// release, or the cancel of its leg before the answer is out; each time the
// held gauge is back to 0, the end counted, and a decode leg that comes
// after finds nothing to pull (a clear error, no tokens).
func TestHeldKVIsFreed(t *testing.T) {
	s := newDisaggStack(t)
	d := s.start(t, "decode", "decode")
	c := tcpClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tests := []struct {
		name string
		end  realtime.HandoffEnd
		// flags of the prefill mocker; free frees the handoff (nil: the
		// timeout does) and says whether the test checks the end.
		flags []string
		free  func(t *testing.T, p *disaggMocker, req *workerv1.GenerateRequest)
	}{
		{name: "timeout", end: realtime.HandoffTimedOut, flags: []string{"--handoff-timeout", "20ms"},
			free: func(t *testing.T, p *disaggMocker, req *workerv1.GenerateRequest) {
				prefillLeg(ctx, t, c, p, req, 20)
			}},
		{name: "release", end: realtime.HandoffReleased, flags: []string{"--handoff-timeout", "1h"},
			free: func(t *testing.T, p *disaggMocker, req *workerv1.GenerateRequest) {
				prefillLeg(ctx, t, c, p, req, 3600_000)
				cc, api, err := worker.DialAPI(p.w.APIAddr(), grpcclient.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				for _, want := range []bool{true, false} {
					r, err := api.ReleaseKvHandoff(ctx, &workerv1.ReleaseKvHandoffRequest{HandoffId: req.RequestId})
					if err != nil || r.Released != want {
						t.Fatalf("ReleaseKvHandoff = %v, %v; want released %v", r, err, want)
					}
				}
			}},
		// A slow prefill (chunks of 16 tokens, 50 times slower than real
		// time: about 0.4 s a chunk) is cancelled once its first blocks
		// are published, before its answer.
		{name: "cancel before the answer", end: realtime.HandoffCancelled,
			flags: []string{"--handoff-timeout", "1h", "--no-delay=false", "--speedup-ratio", "0.05", "--max-num-batched-tokens", "16"},
			free: func(t *testing.T, p *disaggMocker, req *workerv1.GenerateRequest) {
				lctx, stop := context.WithCancel(ctx)
				defer stop()
				leg := proto.Clone(req).(*workerv1.GenerateRequest)
				leg.Leg = workerv1.DisaggregationLeg_DISAGGREGATION_LEG_PREFILL
				done := make(chan error, 1)
				go func() {
					_, err := workertest.Generate(lctx, c, workertest.TCP(p.w.Instance()), leg)
					done <- err
				}()
				waitBlocks(t, p.w, kvhash.Hashes(req.TokenIds[:16], 16, nil))
				stop()
				if err := <-done; err == nil {
					t.Fatal("the cancelled prefill leg answered")
				}
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := s.start(t, "prefill", fmt.Sprint("prefill-", i), tt.flags...)
			req := &workerv1.GenerateRequest{RequestId: fmt.Sprint("held-", i), TokenIds: seq(uint32(1000*(i+1)), 200), MaxTokens: 4}
			tt.free(t, p, req)
			if tt.end != realtime.HandoffCancelled {
				if e := p.waitEnd(t); e != (handoffEnd{req.RequestId, tt.end, 13}) {
					t.Fatalf("handoff end %+v, want %s %v 13", e, req.RequestId, tt.end)
				}
				if got := p.metric(t, fmt.Sprintf(`switchyard_mocker_kv_handoffs_ended_total{end=%q}`, tt.end)); got != "1" {
					t.Fatalf("ended %v: %s, want 1", tt.end, got)
				}
			}
			// Cancelled mid-prefill, nothing was held: the engine freed
			// the request's blocks; either way none stay in use.
			p.waitMetric(t, "switchyard_mocker_kv_handoff_held_blocks", "0")
			p.waitMetric(t, "switchyard_engine_kv_blocks_used", "0")
			// The decode leg of a handoff no longer held: a clear error.
			m, _ := proto.Marshal(&workerv1.MockKvHandoff{HandoffId: req.RequestId, Address: p.w.APIAddr(), Blocks: 13})
			h := &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: m, PrefillInstanceId: p.w.InstanceID()}
			rs, err := decodeLeg(ctx, t, c, d, req, h)
			var he *transport.HandlerError
			if !errors.As(err, &he) || he.Code != worker.CodeKVHandoffFailed || !strings.Contains(he.Message, "KV_HANDOFF_NOT_FOUND") && !strings.Contains(he.Message, "no KV held") {
				t.Fatalf("decode leg of a freed handoff: %v; want %s naming the missing handoff", err, worker.CodeKVHandoffFailed)
			}
			if toks, _ := workertest.Output(rs); len(toks) != 0 {
				t.Fatalf("decode leg of a freed handoff generated %v", toks)
			}
		})
	}
}

// TestDecodeLegWithoutItsKV: a decode leg whose KV cannot be taken ends
// with a clear handler error within the pull bound, never a hang: its
// prefill worker stopped, a prefill worker that never answers (a socket that
// accepts and says nothing), or a handoff the decode worker does not speak.
func TestDecodeLegWithoutItsKV(t *testing.T) {
	s := newDisaggStack(t)
	d := s.start(t, "decode", "decode", "--kv-pull-timeout", "300ms")
	c := tcpClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- conn // held open, never answered
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		for conn := range accepted {
			conn.Close()
		}
	})

	mock := func(addr string) *workerv1.KvHandoff {
		m, _ := proto.Marshal(&workerv1.MockKvHandoff{HandoffId: "gone", Address: addr, Blocks: 2})
		return &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: m}
	}
	tests := []struct {
		name    string
		handoff func(t *testing.T) *workerv1.KvHandoff
		code    string
	}{
		{"prefill worker stopped", func(t *testing.T) *workerv1.KvHandoff {
			p := s.start(t, "prefill", "prefill-stopped", "--handoff-timeout", "1h")
			h := prefillLeg(ctx, t, c, p, &workerv1.GenerateRequest{RequestId: "stopped", TokenIds: seq(100, 30), MaxTokens: 3}, 3600_000)
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			return h
		}, worker.CodeKVHandoffFailed},
		{"prefill worker never answers", func(*testing.T) *workerv1.KvHandoff { return mock(silent.Addr().String()) }, worker.CodeKVHandoffFailed},
		{"nobody listens", func(*testing.T) *workerv1.KvHandoff { return mock(closedAddr(t)) }, worker.CodeKVHandoffFailed},
		{"another transfer kind", func(*testing.T) *workerv1.KvHandoff {
			return &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL, Payload: []byte(`{"remote_engine_id":"x"}`)}
		}, "invalid_argument"},
		{"no handoff", func(*testing.T) *workerv1.KvHandoff { return nil }, "invalid_argument"},
		{"more blocks than the prompt", func(*testing.T) *workerv1.KvHandoff {
			m, _ := proto.Marshal(&workerv1.MockKvHandoff{HandoffId: "big", Address: "127.0.0.1:1", Blocks: 3})
			return &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: m}
		}, "invalid_argument"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.handoff(t)
			req := &workerv1.GenerateRequest{RequestId: fmt.Sprint("orphan-", i), TokenIds: seq(100, 30), MaxTokens: 3}
			rs, err := decodeLeg(ctx, t, c, d, req, h)
			var he *transport.HandlerError
			if !errors.As(err, &he) || he.Code != tt.code {
				t.Fatalf("decode leg: %v; want handler error %s", err, tt.code)
			}
			if toks, _ := workertest.Output(rs); len(toks) != 0 {
				t.Fatalf("decode leg without its KV generated %v", toks)
			}
		})
	}
}

// closedAddr is a loopback address nothing listens on: a port bound and
// closed again.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
