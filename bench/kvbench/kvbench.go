// Package kvbench measures the KV event planes side by side, in process:
// an embedded etcd with a registry, an embedded NATS with an eventbus,
// workers of the Go SDK fed synthetic KV events (no engine, so that the
// event plane is what is measured) and one router per mode. For each mode
// it reports block events per second into the router, publish-to-indexed
// latency percentiles, and how long a restarted router takes to be exact
// again over the blocks the workers hold (about a million by default).
package kvbench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker"
	"github.com/switchyard-llm/switchyard/services/router"
	"github.com/switchyard-llm/switchyard/services/router/core"
	"github.com/switchyard-llm/switchyard/services/router/index"
	"github.com/switchyard-llm/switchyard/services/stack/controlplane"
)

// Options size a run.
type Options struct {
	// Modes to measure, in order.
	Modes []kvevents.Mode
	// Workers publishing at once.
	Workers int
	// Batches each worker publishes in the throughput phase, of
	// EventsPerBatch stored events of BlocksPerEvent new blocks: the
	// defaults make 8 x 2000 x 4 x 16 = 1,024,000 blocks, which the
	// restart phase then recovers.
	Batches, EventsPerBatch, BlocksPerEvent int
	// Probes is how many single events are timed from publish to indexed.
	Probes int
	// Log receives the services' logs; nil discards them.
	Log *slog.Logger
}

// DefaultOptions are the benchmark's standard size: 8 workers, about 1M
// blocks.
func DefaultOptions() Options {
	return Options{Modes: []kvevents.Mode{kvevents.JetStream, kvevents.Core, kvevents.Direct}, Workers: 8,
		Batches: 2000, EventsPerBatch: 4, BlocksPerEvent: 16, Probes: 400}
}

// Result is one mode's figures.
type Result struct {
	Mode kvevents.Mode
	// BlockEventsPerSec is stored blocks per second from the first publish
	// until the router has applied every one.
	BlockEventsPerSec float64
	// CPUPerMBlocks is the CPU time the whole process (workers, eventbus,
	// NATS and router: everything of the plane) spent per million blocks
	// in the throughput phase: a figure a busy machine does not skew, and
	// 1/CPUPerMBlocks million block events per second is what one
	// dedicated core would carry.
	CPUPerMBlocks time.Duration
	// P50 and P99 are publish-to-indexed latencies of single events.
	P50, P99 time.Duration
	// Blocks the router held when it was restarted, and the time from the
	// new router's start until its index equalled the workers' state.
	Blocks  int
	Restart time.Duration
	// Exact reports that the restarted index equalled the workers' state.
	Exact bool
}

// env is the shared part: registry and eventbus.
type env struct {
	regAddr, busAddr string
	stop             func()
	log              *slog.Logger
}

func startEnv(o Options) (*env, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cp, err := controlplane.Start("kv-events-bench-", log)
	if err != nil {
		return nil, err
	}
	return &env{regAddr: cp.RegistryAddr(), busAddr: cp.EventbusAddr(), stop: cp.Close, log: log}, nil
}

// Run measures every mode of o.
func Run(ctx context.Context, o Options) ([]Result, error) {
	e, err := startEnv(o)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	var out []Result
	for _, m := range o.Modes {
		r, err := e.runMode(ctx, o, m)
		if err != nil {
			return out, fmt.Errorf("%s: %w", m, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// rt is a running router.
type rt struct {
	svc  *router.Service
	stop func()
}

func (e *env) startRouter(m kvevents.Mode) (*rt, error) {
	cfg := router.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second}, Mode: "kv", Core: core.DefaultConfig(),
		RegistryAddr: e.regAddr, EventbusAddr: e.busAddr, KVEventsMode: string(m), ResyncInterval: router.DefaultResyncInterval}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := router.Start(ctx, cfg, e.log)
	if err != nil {
		cancel()
		return nil, err
	}
	select { // it routes once the registry has answered and its snapshot is loaded
	case <-svc.Ready():
	case <-ctx.Done():
		cancel()
		_ = svc.Wait()
		return nil, ctx.Err()
	}
	return &rt{svc: svc, stop: func() { cancel(); _ = svc.Wait() }}, nil
}

func (e *env) runMode(ctx context.Context, o Options, m kvevents.Mode) (Result, error) {
	res := Result{Mode: m}
	ns := "kvbench-" + string(m)
	tc := transport.DefaultConfig()
	tc.TCP.Host = "127.0.0.1"
	var ws []*worker.Worker
	defer func() {
		for _, w := range ws {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = w.Shutdown(sctx)
			cancel()
		}
	}()
	idle := func(context.Context, *workerv1.GenerateRequest, func(*workerv1.GenerateResponse) error) error {
		return nil
	}
	for range o.Workers {
		w, err := worker.Start(ctx, worker.Config{Namespace: ns, Component: "backend", Model: worker.Model{Name: "kvbench", BlockSize: 16, ContextLength: 4096},
			RegistryAddr: e.regAddr, EventbusAddr: e.busAddr, Transport: tc, KVEventsMode: m, KVEventsRing: o.Batches*o.EventsPerBatch + o.Probes + 16,
			DrainTimeout: time.Millisecond, Log: e.log}, idle)
		if err != nil {
			return res, err
		}
		ws = append(ws, w)
	}
	r, err := e.startRouter(m)
	if err != nil {
		return res, err
	}
	defer func() { r.stop() }()

	gens := make([]*gen, len(ws))
	for i := range ws {
		gens[i] = &gen{w: ws[i], base: uint64(i+1) << 40, blocks: o.BlocksPerEvent}
	}
	// Warm up: one event per worker, applied, so that every subscription
	// and watch is in place before anything is timed.
	for _, g := range gens {
		g.publish(1)
	}
	if err := waitApplied(ctx, r.svc.Core(), gens); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}

	// Throughput: every worker publishes its batches as fast as it can.
	start, cpu0 := time.Now(), cpuTime()
	var wg sync.WaitGroup
	for _, g := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range o.Batches {
				g.publish(o.EventsPerBatch)
			}
		}()
	}
	wg.Wait()
	if err := waitApplied(ctx, r.svc.Core(), gens); err != nil {
		return res, fmt.Errorf("throughput: %w", err)
	}
	blocks := float64(o.Workers * o.Batches * o.EventsPerBatch * o.BlocksPerEvent)
	res.BlockEventsPerSec = blocks / time.Since(start).Seconds()
	res.CPUPerMBlocks = time.Duration(float64(cpuTime()-cpu0) * 1e6 / blocks)

	// Latency: one event at a time, round robin over the workers, timed
	// from the publish call until the router's index has applied it.
	lat := make([]time.Duration, 0, o.Probes)
	c := r.svc.Core()
	for i := range o.Probes {
		g := gens[i%len(gens)]
		t0 := time.Now()
		id := g.publish(1)
		wid := index.WorkerID{Instance: g.w.InstanceID()}
		for n := 0; c.LastEvent(wid) < id; n++ {
			if n%1024 == 1023 {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				if time.Since(t0) > 30*time.Second {
					return res, fmt.Errorf("probe %d not indexed after 30s", i)
				}
			}
			spin()
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	res.P50, res.P99 = lat[len(lat)/2], lat[len(lat)*99/100]

	// Restart: a new router over everything the workers hold.
	res.Blocks = c.Index().Stats().Entries
	r.stop()
	start = time.Now()
	if r, err = e.startRouter(m); err != nil {
		return res, err
	}
	want := truth(gens)
	for {
		if got := indexed(r.svc.Core(), gens); equal(got, want) {
			res.Restart, res.Exact = time.Since(start), true
			break
		}
		if ctx.Err() != nil || time.Since(start) > 2*time.Minute {
			res.Restart = time.Since(start)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	return res, nil
}

// gen publishes a worker's synthetic events: stored events of new blocks.
type gen struct {
	w      *worker.Worker
	base   uint64
	next   uint64 // hashes used so far
	blocks int
	last   uint64 // last event id
}

// publish publishes one batch of n stored events and returns the id of its
// last event.
func (g *gen) publish(n int) uint64 {
	evs := make([]*workerv1.KvCacheEvent, n)
	for i := range evs {
		bs := make([]*workerv1.KvBlock, g.blocks)
		for j := range bs {
			g.next++
			bs[j] = &workerv1.KvBlock{SequenceHash: g.base | g.next, LocalHash: g.next}
		}
		evs[i] = &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: &workerv1.KvBlocksStored{Blocks: bs}}}
	}
	b := &workerv1.KvEventBatch{Events: evs}
	g.w.PublishKVEvents(b)
	g.last = b.FirstEventId + uint64(n) - 1
	return g.last
}

func waitApplied(ctx context.Context, c *core.Core, gens []*gen) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, g := range gens {
		wid := index.WorkerID{Instance: g.w.InstanceID()}
		for c.LastEvent(wid) < g.last {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("worker %x: event %d of %d applied after 2 minutes", wid.Instance, c.LastEvent(wid), g.last)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// truth counts each worker's blocks and last event id, from its own index.
func truth(gens []*gen) map[uint64][2]uint64 {
	out := map[uint64][2]uint64{}
	for _, g := range gens {
		out[g.w.InstanceID()] = [2]uint64{uint64(g.w.KVIndex().Blocks(0)), g.last}
	}
	return out
}

func indexed(c *core.Core, gens []*gen) map[uint64][2]uint64 {
	out := map[uint64][2]uint64{}
	for _, g := range gens {
		wid := index.WorkerID{Instance: g.w.InstanceID()}
		out[wid.Instance] = [2]uint64{uint64(c.Index().Blocks(wid)), c.LastEvent(wid)}
	}
	return out
}

func equal(a, b map[uint64][2]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// spin yields while a probe waits: the router's goroutines need the CPU.
func spin() { runtime.Gosched() }

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
