package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// The simulated workers of the bench do on the control plane what a worker
// of the Go SDK (pkg/worker) does, the same way: a lease of its own kept
// alive on a KeepAlive stream of its own (registryclient.Session), its instance
// and model card registered on the lease (and again on a new lease when the
// registry says the lease is gone, as the SDK's worker does), KV event
// batches published in order through an eventbus Publisher of its own (the
// first one awaited before the next is sent; with a KV publish interval,
// the batches rolled meanwhile held and sent as one), a load report
// published every interval on a publishing stream of its own (each awaited,
// up to 2 s; with a KV publish interval, at once in one message with the
// held KV events instead), and generate served on a request plane server of its own
// with an immediate one-token reply. What they do not do is run an engine,
// serve WorkerService, or dial their own gRPC connections: every
// WorkersPerConn workers of one process share one connection to the
// registry and one to the eventbus (the SDK dials both per worker, and
// uploads the tokenizer per worker).

// BlockSize is the KV block size of the simulated model's card.
const BlockSize = 16

// SimConfig says how the simulated workers behave.
type SimConfig struct {
	Namespace, Component string
	// Model is the model card's name; Artifacts its tokenizer, uploaded once.
	Model     string
	Artifacts []*registryv1.TokenizerArtifact
	// KVRate is KV event batches per second per worker (0: none besides
	// the first).
	KVRate float64
	// LoadInterval is how often a worker publishes its load (0: never).
	LoadInterval time.Duration
	// LoadHeartbeat is how long a worker whose load report did not change
	// waits before it publishes it again, as the SDK's
	// (worker.Config.LoadHeartbeat; 0: every interval publishes).
	LoadHeartbeat time.Duration
	// KVPublishInterval is the least time between two KV publishes of a
	// worker, as the SDK's (worker.Config.KVPublishInterval): the batches
	// rolled meanwhile are held and go out as one batch. 0 publishes each
	// batch as it is rolled.
	KVPublishInterval time.Duration
	// LeaseTTL is each worker's lease TTL (0: the registry's default).
	LeaseTTL time.Duration
	// Window is how many rolling blocks a worker keeps before it removes
	// the oldest, which bounds the index at Window blocks per worker.
	Window int
	Log    *slog.Logger
}

// Fleet is the simulated workers of one process and the clients they share.
type Fleet struct {
	cfg SimConfig
	// conns are the process's connections to the registry and the
	// eventbus, one pair per WorkersPerConn workers: a worker holds a
	// KeepAlive stream on one and a publishing stream on the other for
	// its whole life, and a server takes at most
	// grpcserver.DefaultLimits.MaxConcurrentStreams (1,000) streams on one
	// connection; past that every new call on it waits for a stream to end.
	registryAddr, eventbusAddr string
	connMu                     sync.Mutex
	conns                      []conns

	mu      sync.Mutex
	workers map[*Sim]struct{}
	nextKey atomic.Uint64

	stopTick chan struct{}
	tickDone chan struct{}
	// pause asks the clock to stop publishing (see PauseKV); inflight
	// counts the rolling batches sent and not yet acknowledged.
	pause    chan chan struct{}
	inflight sync.WaitGroup

	// KVEvents counts KV events acknowledged by the eventbus, KVFailed those
	// it did not take, KVSends the messages sent holding KV events and
	// LoadSends those holding only a load report; LoadSent and LoadFailed
	// the load reports;
	// Reregistered the leases lost (each worker registered again), and
	// KVOfLost the KV events published under those leases' instances.
	KVEvents, KVFailed, KVSends, LoadSends, LoadSent, LoadFailed, Reregistered, KVOfLost atomic.Uint64
}

// NewFleet dials the registry and the eventbus once for every worker it
// will start, and starts the KV event clock.
func NewFleet(registryAddr, eventbusAddr string, cfg SimConfig) (*Fleet, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Window <= 0 {
		cfg.Window = 32
	}
	f := &Fleet{cfg: cfg, registryAddr: registryAddr, eventbusAddr: eventbusAddr, workers: map[*Sim]struct{}{}, stopTick: make(chan struct{}), tickDone: make(chan struct{}), pause: make(chan chan struct{})}
	if _, err := f.connsFor(0); err != nil {
		return nil, err
	}
	go f.tick()
	return f, nil
}

// WorkersPerConn is how many workers share one connection to the registry
// and one to the eventbus (see Fleet.conns).
const WorkersPerConn = 400

type conns struct {
	reg *registryclient.Client
	bus *eventbusclient.Client
}

// connsFor is the connections of the worker numbered key, dialled when it
// is the first of its share.
func (f *Fleet) connsFor(key uint64) (conns, error) {
	f.connMu.Lock()
	defer f.connMu.Unlock()
	i := int(key / WorkersPerConn)
	for len(f.conns) <= i {
		reg, err := registryclient.Dial([]string{f.registryAddr}, registryclient.Options{Log: f.cfg.Log})
		if err != nil {
			return conns{}, err
		}
		bus, err := eventbusclient.Dial([]string{f.eventbusAddr}, eventbusclient.Options{Log: f.cfg.Log})
		if err != nil {
			reg.Close()
			return conns{}, err
		}
		f.conns = append(f.conns, conns{reg, bus})
	}
	return f.conns[i], nil
}

// Close stops the clock and closes the shared connections; Stop every worker
// first.
func (f *Fleet) Close() {
	close(f.stopTick)
	<-f.tickDone
	for _, c := range f.conns {
		c.reg.Close()
		c.bus.Close()
	}
}

// Len is the number of running workers.
func (f *Fleet) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.workers)
}

// Sim is one simulated worker.
type Sim struct {
	f     *Fleet
	key   uint64 // tells workers' token sequences apart
	srv   transport.Server
	reg   *registryclient.Client
	bus   *eventbusclient.Client
	pub   *eventbusclient.Publisher
	acks  chan sentBatch
	acked chan struct{}
	// ackCtx bounds the wait for acknowledgements; Stop cancels it when
	// its own context ends.
	ackCtx    context.Context
	ackCancel context.CancelFunc
	served    atomic.Int64
	// signatures is how many signature sequences its first batch stores.
	signatures int

	// kvMu guards the registration (sess, inst, registering: replaced when
	// the worker registers again) and the KV event numbering.
	kvMu sync.Mutex
	sess *registryclient.Session
	inst *registryv1.Instance
	// registering is when the worker asked the registry to register it.
	registering time.Time

	nextEvent uint64
	rolling   []uint64
	rollSeq   uint64
	stopped   bool
	// held is the rolled events not yet sent (SimConfig.KVPublishInterval),
	// one numbered batch; lastKV is when the last rolled batch was sent.
	held   *workerv1.KvEventBatch
	lastKV time.Time
	// heldLoad is a load report to send with them.
	heldLoad *eventbusv1.Event

	stopLoad chan struct{}
	loadDone chan struct{}
	// stopLease ends keepRegistered; leaseDone closes when it has.
	stopLease, leaseDone chan struct{}
}

type sentBatch struct {
	b     *eventbusclient.Batch
	n     uint64 // KV events
	loads uint64 // load reports
}

// Signatures is how many token sequences of one block each worker stores
// with its first KV event batch; Prompt(i) is the i-th. A request for a
// signature is routed to the worker that stores it (a KV hit on one worker
// only), which is how the bench tells that a worker is routable.
func (s *Sim) Prompt(i int) []uint32 { return signature(s.key, i) }

// signatureHash is the sequence hash of the worker's i-th signature block.
func (s *Sim) signatureHash(i int) uint64 {
	return kvhash.Hashes(signature(s.key, i), BlockSize, nil)[0].Sequence
}

// signature is the tokens of worker key's i-th signature sequence: one
// block of token ids in [1000, 101000), distinct across workers and i.
func signature(key uint64, i int) []uint32 {
	out := make([]uint32, BlockSize)
	for k := range out {
		out[k] = 1000 + uint32(kvhash.LocalHash([]uint32{uint32(key), uint32(i), uint32(k)})%100000)
	}
	return out
}

// Start starts a worker that stores signatures signature sequences: it
// serves the request plane, registers its instance and model card on a new
// lease, publishes its first KV event batch (the signatures) and waits for
// the eventbus to store it, then publishes KV events and load at the
// configured rates until Stop.
func (f *Fleet) Start(ctx context.Context, signatures int) (_ *Sim, err error) {
	s := &Sim{f: f, key: f.nextKey.Add(1), stopLoad: make(chan struct{}), loadDone: make(chan struct{}), stopLease: make(chan struct{}), leaseDone: make(chan struct{})}
	tc := transport.DefaultConfig()
	tc.TCP.Host, tc.TCP.Port = "127.0.0.1", 0
	srv, err := transport.NewServer(tc)
	if err != nil {
		return nil, err
	}
	srv.Handle(wire.GenerateEndpoint, s.generate)
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	s.srv = srv
	defer func() {
		if err != nil {
			_ = srv.Close()
		}
	}()
	cs, err := f.connsFor(s.key)
	if err != nil {
		return nil, err
	}
	s.bus, s.reg, s.signatures = cs.bus, cs.reg, signatures
	s.pub = s.bus.NewPublisher(context.Background(), eventbusclient.PublisherOptions{})
	if err := s.register(ctx); err != nil {
		s.pub.Close()
		return nil, err
	}
	s.acks, s.acked = make(chan sentBatch, 64), make(chan struct{})
	s.ackCtx, s.ackCancel = context.WithCancel(context.Background())
	go s.awaitAcks()
	go s.publishLoad()
	go s.keepRegistered()
	f.mu.Lock()
	f.workers[s] = struct{}{}
	f.mu.Unlock()
	return s, nil
}

// register registers the worker as a new instance, as a worker of the SDK
// does at its start and again when its lease is lost: a new lease, the
// instance and its model card on it, and its first KV event batch (the
// signatures, numbered from 1 under the new instance id) stored before any
// later one is sent.
func (s *Sim) register(ctx context.Context) (err error) {
	f := s.f
	sess, err := registryclient.NewSession(ctx, s.reg, registryclient.SessionOptions{TTL: f.cfg.LeaseTTL, Logger: f.cfg.Log})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = sess.Close(cctx)
			cancel()
		}
	}()
	registering := time.Now()
	in, err := sess.Register(ctx, &registryv1.Instance{Namespace: f.cfg.Namespace, Component: f.cfg.Component, Endpoint: wire.GenerateEndpoint,
		Transport: transport.TransportOf(s.srv.Addresses(wire.GenerateEndpoint)...)})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if err := sess.RegisterModel(ctx, &registryv1.ModelCard{Namespace: f.cfg.Namespace, Component: f.cfg.Component, Endpoint: wire.GenerateEndpoint,
		ModelName: f.cfg.Model, BlockSize: BlockSize, ContextLength: 32768, Tokenizer: f.cfg.Artifacts}); err != nil {
		return fmt.Errorf("register model card: %w", err)
	}
	s.kvMu.Lock()
	if s.inst != nil {
		// The events of the lost instance: the router indexed those that
		// came before the registry dropped it, and none after. The held
		// ones go out too, as an SDK worker publishes what it queued.
		s.sendHeld()
		f.KVOfLost.Add(s.nextEvent)
	}
	s.sess, s.inst, s.registering = sess, in, registering
	s.nextEvent, s.rolling = 0, nil
	s.kvMu.Unlock()
	// The first batch is in the stream before any later one is sent (as
	// the SDK does): a router takes a worker's first event for its start.
	first := &workerv1.KvEventBatch{}
	for i := range s.signatures {
		first.Events = append(first.Events, storedEvent(s.signatureHash(i)))
	}
	if len(first.Events) > 0 {
		if err := s.publishNow(ctx, first); err != nil {
			return err
		}
	}
	return nil
}

// keepRegistered registers the worker again, as a worker of the SDK does,
// when the registry says its lease is gone (a keep-alive that came too
// late), until Stop.
func (s *Sim) keepRegistered() {
	defer close(s.leaseDone)
	for {
		s.kvMu.Lock()
		sess := s.sess
		s.kvMu.Unlock()
		select {
		case <-s.stopLease:
			return
		case <-sess.Done():
		}
		s.f.Reregistered.Add(1)
		s.f.cfg.Log.Warn("simulated worker lost its lease; registering again", "instance", fmt.Sprintf("%x", sess.ID()), "err", sess.Err())
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			go func() {
				select {
				case <-s.stopLease:
					cancel()
				case <-ctx.Done():
				}
			}()
			err := s.register(ctx)
			cancel()
			if err == nil {
				break
			}
			select {
			case <-s.stopLease:
				return
			case <-time.After(wait):
			}
		}
	}
}

func storedEvent(hashes ...uint64) *workerv1.KvCacheEvent {
	st := &workerv1.KvBlocksStored{}
	for _, h := range hashes {
		st.Blocks = append(st.Blocks, &workerv1.KvBlock{SequenceHash: h, LocalHash: h})
	}
	return &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Stored{Stored: st}}
}

// publishNow numbers b, publishes it after the held events and waits for
// the stream to store it.
func (s *Sim) publishNow(ctx context.Context, b *workerv1.KvEventBatch) error {
	s.kvMu.Lock()
	s.sendHeld()
	ev, n, err := s.number(b)
	var sent *eventbusclient.Batch
	if err == nil {
		sent, err = s.pub.Send(ctx, []*eventbusv1.Event{ev})
		s.f.KVSends.Add(1)
		s.lastKV = time.Now()
	}
	s.kvMu.Unlock()
	if err == nil {
		_, err = sent.Wait(ctx)
	}
	if err != nil {
		s.f.KVFailed.Add(n)
		return fmt.Errorf("publish KV events: %w", err)
	}
	s.f.KVEvents.Add(n)
	return nil
}

// number gives b the worker's next event ids and makes its eventbus event;
// kvMu is held.
func (s *Sim) number(b *workerv1.KvEventBatch) (*eventbusv1.Event, uint64, error) {
	b.InstanceId = s.inst.InstanceId
	b.FirstEventId = s.nextEvent + 1
	s.nextEvent += uint64(len(b.Events))
	ev, err := s.eventOf(b)
	return ev, uint64(len(b.Events)), err
}

// eventOf is the eventbus event of a numbered batch.
func (s *Sim) eventOf(b *workerv1.KvEventBatch) (*eventbusv1.Event, error) {
	return eventbusclient.NewEvent(wire.KVEventsSubject(s.f.cfg.Namespace, s.f.cfg.Component), b,
		eventbusclient.WithMsgID(wire.KVEventsMsgID(b.InstanceId, b.DpRank, b.FirstEventId)))
}

// PublishStored publishes one batch that stores hash and returns when the
// eventbus has acknowledged it; with a publish interval (configured, or
// asked by the eventbus) and rolling batches it is held with the rolled
// ones instead, as the SDK holds a batch, and the call returns at once: a
// probe then times what a worker's events wait as well.
func (s *Sim) PublishStored(ctx context.Context, hash uint64) error {
	b := &workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{storedEvent(hash)}}
	if s.kvInterval() <= 0 || s.f.cfg.KVRate <= 0 {
		return s.publishNow(ctx, b)
	}
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.stopped {
		return errors.New("publish KV events: the worker stopped")
	}
	s.holdLocked(b)
	return nil
}

// roll publishes the worker's next rolling batch: one new block stored, and
// the oldest removed once the window is full; with a publish interval it
// holds it with those rolled since the last publish until the interval has
// passed (within half a roll period: the roll nearest to it). It does not
// wait.
func (s *Sim) roll() {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	if s.stopped {
		return
	}
	s.rollSeq++
	h := kvhash.LocalHash([]uint32{uint32(s.key), uint32(s.key >> 32), uint32(s.rollSeq), uint32(s.rollSeq >> 32), 7})
	b := &workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{storedEvent(h)}}
	s.rolling = append(s.rolling, h)
	if len(s.rolling) > s.f.cfg.Window {
		b.Events = append(b.Events, &workerv1.KvCacheEvent{Event: &workerv1.KvCacheEvent_Removed{Removed: &workerv1.KvBlocksRemoved{SequenceHashes: []uint64{s.rolling[0]}}}})
		s.rolling = s.rolling[1:]
	}
	s.holdLocked(b)
}

// holdLocked numbers b, adds it to the held events and sends them when the
// interval has passed; kvMu is held.
func (s *Sim) holdLocked(b *workerv1.KvEventBatch) {
	b.InstanceId = s.inst.InstanceId
	b.FirstEventId = s.nextEvent + 1
	s.nextEvent += uint64(len(b.Events))
	if s.held == nil {
		s.held = b
	} else {
		s.held.Events = append(s.held.Events, b.Events...)
	}
	iv := s.kvInterval()
	if iv > 0 && s.f.cfg.KVRate > 0 {
		iv -= time.Duration(float64(time.Second) / s.f.cfg.KVRate / 2)
	}
	if now := time.Now(); iv <= 0 || now.Sub(s.lastKV) >= iv {
		s.lastKV = now
		s.sendHeld()
	}
}

// kvInterval is the least time between two KV publishes, as the SDK's: the
// configured one, or the longer one the eventbus asks for.
func (s *Sim) kvInterval() time.Duration {
	return max(s.f.cfg.KVPublishInterval, s.pub.Interval())
}

// flushKV sends the held events, if any.
func (s *Sim) flushKV() {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	s.sendHeld()
}

// sendHeld sends the held events, numbered already, and the held load
// report after them, in one message, without waiting; kvMu is held.
func (s *Sim) sendHeld() {
	b, load := s.held, s.heldLoad
	s.held, s.heldLoad = nil, nil
	var evs []*eventbusv1.Event
	var n, loads uint64
	if b != nil {
		n = uint64(len(b.Events))
		ev, err := s.eventOf(b)
		if err != nil {
			s.f.KVFailed.Add(n)
			return
		}
		evs = append(evs, ev)
	}
	if load != nil {
		evs, loads = append(evs, load), 1
	}
	if len(evs) == 0 {
		return
	}
	sent, err := s.pub.Send(context.Background(), evs)
	if err != nil {
		s.f.KVFailed.Add(n)
		s.f.LoadFailed.Add(loads)
		return
	}
	if n > 0 {
		s.f.KVSends.Add(1)
	} else {
		s.f.LoadSends.Add(1)
	}
	s.f.inflight.Add(1)
	s.acks <- sentBatch{sent, n, loads}
}

func (s *Sim) awaitAcks() {
	defer close(s.acked)
	for sb := range s.acks {
		ctx, cancel := context.WithTimeout(s.ackCtx, time.Minute)
		if _, err := sb.b.Wait(ctx); err != nil {
			s.f.KVFailed.Add(sb.n)
			s.f.LoadFailed.Add(sb.loads)
		} else {
			s.f.KVEvents.Add(sb.n)
			s.f.LoadSent.Add(sb.loads)
		}
		cancel()
		s.f.inflight.Done()
	}
}

func (s *Sim) publishLoad() {
	defer close(s.loadDone)
	if s.f.cfg.LoadInterval <= 0 {
		return
	}
	// While KV events are held for an interval (configured, or asked by
	// the eventbus) a report goes out at once with the held KV events, in
	// one message on the KV stream, as the SDK's; otherwise on a stream of
	// its own, opened when first needed.
	var pub *eventbusclient.Publisher
	defer func() {
		if pub != nil {
			pub.Close()
		}
	}()
	t := time.NewTicker(s.f.cfg.LoadInterval)
	defer t.Stop()
	var same worker.LoadSampler
	for {
		var now time.Time
		select {
		case <-s.stopLoad:
			return
		case now = <-t.C:
		}
		s.kvMu.Lock()
		used, id := uint64(len(s.rolling)), s.inst.InstanceId
		s.kvMu.Unlock()
		m := &workerv1.LoadMetrics{InstanceId: id, KvBlocksTotal: 4096, KvBlocksUsed: used, Timestamp: timestamppb.Now()}
		// As the SDK: the heartbeat is reached at the tick nearest to it.
		if hb := s.f.cfg.LoadHeartbeat; hb > 0 && !same.Due(now, hb-s.f.cfg.LoadInterval/2, []*workerv1.LoadMetrics{m}) {
			continue
		}
		ev, err := eventbusclient.NewEvent(wire.LoadSubject(s.f.cfg.Namespace, s.f.cfg.Component), m)
		if err != nil {
			s.f.LoadFailed.Add(1)
			continue
		}
		if iv := s.kvInterval(); iv > 0 {
			s.kvMu.Lock()
			switch {
			case s.stopped:
			case iv > s.f.cfg.KVPublishInterval && s.f.cfg.KVRate > 0:
				// An interval the eventbus asked for: the report waits
				// with the KV events for the roll that sends them, as the
				// SDK's waits out the interval.
				s.heldLoad = ev
			default:
				s.heldLoad, s.lastKV = ev, now
				s.sendHeld()
			}
			s.kvMu.Unlock()
			same.Published(now)
			continue
		}
		if pub == nil {
			pub = s.bus.NewPublisher(context.Background(), eventbusclient.PublisherOptions{MaxInFlight: 4})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		b, err := pub.Send(ctx, []*eventbusv1.Event{ev})
		s.f.LoadSends.Add(1)
		if err == nil {
			_, err = b.Wait(ctx)
		}
		if err != nil {
			s.f.LoadFailed.Add(1)
		} else {
			s.f.LoadSent.Add(1)
			same.Published(now)
		}
		cancel()
	}
}

// generate answers at once with one token.
func (s *Sim) generate(_ context.Context, req *transport.Request, rw transport.ResponseWriter) error {
	gr := &workerv1.GenerateRequest{}
	if err := proto.Unmarshal(req.Payload, gr); err != nil {
		return &transport.HandlerError{Code: transport.CodeInvalidArgument, Message: err.Error()}
	}
	s.served.Add(1)
	out, err := proto.Marshal(&workerv1.GenerateResponse{TokenIds: []uint32{13}, FinishReason: workerv1.FinishReason_FINISH_REASON_LENGTH,
		Usage: &workerv1.Usage{PromptTokens: uint32(len(gr.TokenIds)), CompletionTokens: 1}})
	if err != nil {
		return err
	}
	return rw.Send(out)
}

// Served is how many generate requests the worker answered.
func (s *Sim) Served() int64 { return s.served.Load() }

// InstanceID is the worker's registered instance id.
func (s *Sim) InstanceID() uint64 {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	return s.inst.InstanceId
}

// registeredAt is when the worker last asked the registry to register it.
func (s *Sim) registeredAt() time.Time {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	return s.registering
}

// Stop stops the worker's KV events and waits for the eventbus to
// acknowledge those sent, then deregisters it (its lease revoked: routers
// and frontends drop it at once), stops its load reports and closes its
// request plane. A batch sent after the deregistration could reach a
// router that had already dropped the worker, which skips it (rightly: the
// blocks went with the worker), and it would be counted as lost.
func (s *Sim) Stop(ctx context.Context) error { return s.stop(ctx, true) }

// Kill stops the worker as a crash would, except that the KV events it
// sent are waited for as Stop does (so the bench's count of indexed events
// stays exact): its keep-alive stops without revoking the lease, so routers
// and frontends drop it only when the lease's TTL runs out on the registry.
func (s *Sim) Kill(ctx context.Context) error { return s.stop(ctx, false) }

func (s *Sim) stop(ctx context.Context, revoke bool) error {
	s.f.mu.Lock()
	delete(s.f.workers, s)
	s.f.mu.Unlock()
	close(s.stopLease)
	<-s.leaseDone
	stopAcks := context.AfterFunc(ctx, s.ackCancel) // give up waiting once ctx ends
	defer stopAcks()
	s.kvMu.Lock()
	s.sendHeld()
	s.stopped = true
	sess := s.sess
	s.kvMu.Unlock()
	close(s.acks)
	<-s.acked
	var err error
	if revoke {
		err = sess.Close(ctx)
	} else {
		sess.Abandon()
	}
	close(s.stopLoad)
	<-s.loadDone
	_ = s.pub.Close()
	s.ackCancel()
	return errors.Join(err, s.srv.Close())
}

// PauseKV stops the clock's KV batches until the fleet is closed and
// waits for the eventbus to acknowledge (or fail) those sent: from then on
// the events published are all counted, and a router can be waited for
// until it has indexed every one before any worker leaves.
func (f *Fleet) PauseKV(ctx context.Context) error {
	paused := make(chan struct{})
	select {
	case f.pause <- paused:
	case <-f.tickDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	<-paused
	f.mu.Lock()
	workers := make([]*Sim, 0, len(f.workers))
	for s := range f.workers {
		workers = append(workers, s)
	}
	f.mu.Unlock()
	for _, s := range workers {
		s.flushKV()
	}
	f.inflight.Wait()
	return nil
}

// idle answers pause requests, rolling nothing, until the tick stops.
func (f *Fleet) idle() {
	for {
		select {
		case <-f.stopTick:
			return
		case paused := <-f.pause:
			close(paused)
		}
	}
}

// tick publishes every worker's rolling KV batches at KVRate, spreading the
// workers over the period in slots so that the load is even.
func (f *Fleet) tick() {
	defer close(f.tickDone)
	if f.cfg.KVRate <= 0 {
		f.idle()
		return
	}
	const slots = 20
	period := time.Duration(float64(time.Second) / f.cfg.KVRate)
	t := time.NewTicker(period / slots)
	defer t.Stop()
	slot := uint64(0)
	var due []*Sim
	for {
		select {
		case <-f.stopTick:
			return
		case paused := <-f.pause:
			// No roll runs now: every batch sent is counted in inflight.
			t.Stop()
			close(paused)
			f.idle()
			return
		case <-t.C:
		}
		due = due[:0]
		f.mu.Lock()
		for s := range f.workers {
			if s.key%slots == slot {
				due = append(due, s)
			}
		}
		f.mu.Unlock()
		for _, s := range due {
			s.roll()
		}
		slot = (slot + 1) % slots
	}
}
