package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/undo"
	"github.com/switchyard-llm/switchyard/pkg/wire"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// Service is a running planner.
type Service struct {
	cfg       Config
	log       *slog.Logger
	server    *grpcserver.Server
	statusLis net.Listener
	reg       *registryclient.Client
	bus       *eventbusclient.Client
	conn      Connector
	fleet     *fleet
	plan      *core.Planner
	metrics   *metrics
	instances *registryclient.Watcher[*registryv1.Instance]
	models    *registryclient.Watcher[*registryv1.ModelCard]

	mu      sync.Mutex
	history []core.Decision // newest last, at most HistoryLen
	// restored is the samples Restore took back at the start.
	restored int
	// unrecorded is set when the registry keeps no buckets (its
	// kubernetes backend): decisions are then not written to it.
	unrecorded bool
	waiting    string // why the last interval decided nothing

	done chan struct{}
	err  error
}

// Start connects to the registry and eventbus, reads the last decision's
// id, and runs the planner until ctx ends. It returns once its addresses
// are bound.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Service, err error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var u undo.Stack
	defer u.OnError(&err)
	creds, auth, err := cfg.Credentials()
	if err != nil {
		return nil, err
	}
	reg, err := registryclient.Dial([]string{cfg.RegistryAddr}, registryclient.Options{Credentials: creds, Token: auth, Log: log})
	if err != nil {
		return nil, err
	}
	u.Push(func() { _ = reg.Close() })
	bus, err := eventbusclient.Dial([]string{cfg.EventbusAddr}, eventbusclient.Options{Credentials: creds, Token: auth, Log: log})
	if err != nil {
		return nil, err
	}
	u.Push(func() { _ = bus.Close() })
	lastID, err := lastDecisionID(ctx, reg)
	unrecorded := errors.Is(err, errNoBuckets)
	switch {
	case unrecorded && cfg.Connector == "virtual":
		return nil, fmt.Errorf("--connector virtual needs the registry's key-value buckets for its decisions and acknowledgements: %w", err)
	case unrecorded:
		log.Warn("the registry keeps no key-value buckets (the kubernetes discovery backend): decisions are not written to it; /status.json and /metrics show them")
	case err != nil:
		return nil, err
	}
	plan, err := core.New(cfg.core(), lastID)
	if err != nil {
		return nil, err
	}
	restored := 0
	if !unrecorded {
		if restored, err = restore(ctx, reg, plan, cfg.core().MaxAge, time.Now(), log); err != nil {
			log.Warn("the last decisions could not be read back: the rates are learnt afresh", "err", err.Error())
		}
	}
	conn, err := newConnector(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	srv, err := grpcserver.New(cfg.Server, log)
	if err != nil {
		return nil, err
	}
	u.Push(func() { _ = srv.Close() })
	s := &Service{cfg: cfg, log: log, server: srv, reg: reg, bus: bus, conn: conn, fleet: newFleet(), plan: plan,
		metrics: newMetrics(srv.Registry()), done: make(chan struct{}), unrecorded: unrecorded, restored: restored}
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	if cfg.StatusAddr != "" {
		s.statusLis, err = net.Listen("tcp", cfg.StatusAddr)
		if err != nil {
			return nil, fmt.Errorf("listen on --status-addr %s: %w", cfg.StatusAddr, err)
		}
	}
	s.instances = registryclient.WatchInstances(reg, &registryv1.InstanceFilter{}, registryclient.WatchOptions[*registryv1.Instance]{Logger: log})
	s.models = registryclient.WatchModels(reg, &registryv1.ModelFilter{}, registryclient.WatchOptions[*registryv1.ModelCard]{Logger: log})
	log.Info("planner starting", "connector", cfg.Connector, "ttft_slo_ms", cfg.TTFTSLO, "itl_slo_ms", cfg.ITLSLO,
		"min_replicas", cfg.MinReplicas, "max_replicas", cfg.MaxReplicas, "gpu_budget", cfg.GPUBudget,
		"adjustment_interval", cfg.AdjustmentInterval.String(), "predictor", cfg.Predictor, "namespace", cfg.Namespace,
		"last_decision_id", lastID, "restored_samples", restored, "grpc_addr", srv.Addr().String())
	go s.run(ctx)
	return s, nil
}

// Run starts the planner and blocks until ctx ends and it has stopped.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	s, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Wait blocks until the service has stopped.
func (s *Service) Wait() error {
	<-s.done
	return s.err
}

// Addr is the bound gRPC (health) address.
func (s *Service) Addr() net.Addr { return s.server.Addr() }

// MetricsAddr is the bound /metrics address; nil when off.
func (s *Service) MetricsAddr() net.Addr { return s.server.MetricsAddr() }

// StatusAddr is the bound /status.json address; nil when off.
func (s *Service) StatusAddr() net.Addr {
	if s.statusLis == nil {
		return nil
	}
	return s.statusLis.Addr()
}

func (s *Service) run(ctx context.Context) {
	defer close(s.done)
	loopCtx, stopLoop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.consumeLoad(loopCtx) }()
	go func() { defer wg.Done(); s.loop(loopCtx) }()
	var statusSrv *http.Server
	if s.statusLis != nil {
		statusSrv = &http.Server{Handler: s.statusHandler(), ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := statusSrv.Serve(s.statusLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("status server stopped", "err", err.Error())
			}
		}()
	}
	s.err = s.server.Serve(ctx, nil)
	stopLoop()
	if statusSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = statusSrv.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	// The workers the connector started are drained, not abandoned.
	cctx, cancel := context.WithTimeout(context.Background(), s.cfg.Local.StopTimeout+10*time.Second)
	if err := s.conn.Close(cctx); err != nil {
		s.log.Warn("connector close", "err", err.Error())
	}
	cancel()
	s.instances.Close()
	s.models.Close()
	_ = s.bus.Close()
	_ = s.reg.Close()
}

// consumeLoad follows the workers' load reports, from new ones on.
func (s *Service) consumeLoad(ctx context.Context) {
	bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
	req := &eventbusv1.SubscribeRequest{Namespace: s.cfg.Namespace, FilterSubject: wire.LoadFilter(s.cfg.Namespace),
		DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_NEW, AutoAck: true}
	for ctx.Err() == nil {
		sub, err := s.bus.Subscribe(ctx, req)
		if err == nil {
			for {
				var ev *eventbusv1.DeliveredEvent
				if ev, err = sub.Next(ctx); err != nil {
					break
				}
				m, derr := eventbusclient.Decode[workerv1.LoadMetrics](ev)
				if derr != nil {
					s.log.Warn("undecodable load report", "subject", ev.GetSubject(), "err", derr.Error())
					continue
				}
				s.fleet.report(m, time.Now())
				bo.Reset()
			}
			_ = sub.Close()
		}
		if ctx.Err() != nil {
			return
		}
		wait := bo.Next()
		s.log.Warn("load report subscription failed; retrying", "err", err.Error(), "backoff", wait.String())
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// loop decides every adjustment interval.
func (s *Service) loop(ctx context.Context) {
	if err := s.instances.WaitReady(ctx); err != nil {
		return
	}
	if err := s.models.WaitReady(ctx); err != nil {
		return
	}
	t := time.NewTicker(s.cfg.AdjustmentInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.step(ctx, now)
		}
	}
}

// step makes one decision and carries it out.
func (s *Service) step(ctx context.Context, now time.Time) {
	if ok, why := s.conn.Ready(ctx); !ok {
		s.setWaiting(why)
		return
	}
	ms := members(s.models.Items(), s.instances.Items())
	starting := s.conn.Starting(ms)
	obs := s.fleet.observe(now, ms, s.conn.Draining, s.conn.Pinned, starting)
	d := s.plan.Decide(now, obs)
	// The registry first, then the service's own record (status, metrics,
	// Decisions): a reader of both never finds the registry behind.
	if s.unrecorded {
		// The registry keeps no buckets: nothing to write to.
	} else if err := s.write(ctx, d); err != nil {
		s.log.Warn("decision not written to the registry", "id", d.ID, "err", err.Error())
	}
	s.record(d)
	for _, p := range d.Pools {
		if p.Target != p.Current {
			s.log.Info("scaling", "id", d.ID, "pool", p.PoolKey.String(), "from", p.Current, "to", p.Target, "drain", fmt.Sprintf("%x", p.Drain), "reason", p.Reason)
		}
	}
	if err := s.conn.Apply(ctx, d, ms); err != nil {
		s.metrics.connectorErrors.Inc()
		s.log.Error("connector could not carry out the decision", "id", d.ID, "err", err.Error())
	}
	s.metrics.observe(d)
}

func (s *Service) setWaiting(why string) {
	s.mu.Lock()
	s.waiting = why
	s.mu.Unlock()
}

func (s *Service) record(d core.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = ""
	s.history = append(s.history, d)
	if len(s.history) > HistoryLen {
		s.history = s.history[len(s.history)-HistoryLen:]
	}
}

// Decisions are the last decisions, oldest first.
func (s *Service) Decisions() []core.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]core.Decision(nil), s.history...)
}

// write stores d as the last decision and in the history, and drops the
// history's entries older than HistoryLen decisions.
func (s *Service) write(ctx context.Context, d core.Decision) error {
	b, err := d.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rpc := s.reg.Raw()
	if _, err := rpc.CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: Bucket}); err != nil {
		return err
	}
	if _, err := rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: Bucket, Key: HistoryKey(d.ID), Value: b}); err != nil {
		return err
	}
	if _, err := rpc.PutKey(ctx, &registryv1.PutKeyRequest{Bucket: Bucket, Key: DecisionKey, Value: b}); err != nil {
		return err
	}
	if d.ID > HistoryLen {
		_, err = rpc.DeleteKey(ctx, &registryv1.DeleteKeyRequest{Bucket: Bucket, Key: HistoryKey(d.ID - HistoryLen)})
	}
	return err
}

// errNoBuckets is a registry without key-value buckets (its kubernetes
// backend answers Unimplemented).
var errNoBuckets = errors.New("the registry keeps no key-value buckets")

// HistoryKey is the key of decision id in the history.
func HistoryKey(id uint64) string { return fmt.Sprintf("%s%020d", HistoryPrefix, id) }

// restore gives plan back the rates the planner's last decisions in the
// registry observed (core.Planner.Restore), when the newest of them is
// at most maxAge old: a planner restarted at once (a rolling update, a
// crash) goes on with the memory its shrinks need; after a longer gap the
// fleet may have changed, and it learns afresh. It returns the samples
// restored.
func restore(ctx context.Context, reg *registryclient.Client, plan *core.Planner, maxAge time.Duration, now time.Time, log *slog.Logger) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := reg.Raw().ListKeys(ctx, &registryv1.ListKeysRequest{Bucket: Bucket, Prefix: HistoryPrefix})
	if err != nil {
		return 0, err
	}
	var history []core.Decision
	newest := time.Time{}
	for _, kv := range r.GetKvs() {
		d, err := core.DecodeDecision(kv.GetValue())
		if err != nil {
			log.Warn("a decision in the registry could not be read; skipped", "key", kv.GetKey(), "err", err.Error())
			continue
		}
		history = append(history, d)
		if d.At.After(newest) {
			newest = d.At
		}
	}
	if len(history) == 0 || now.Sub(newest) > maxAge {
		return 0, nil
	}
	return plan.Restore(now, history), nil
}

// lastDecisionID reads the last decision's id from the registry, so that
// a restarted planner's ids keep increasing; 0 when there is none.
func lastDecisionID(ctx context.Context, reg *registryclient.Client) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := reg.Raw().CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: Bucket})
	if status.Code(err) == codes.Unimplemented {
		return 0, fmt.Errorf("%w: %v", errNoBuckets, err)
	}
	if err != nil {
		return 0, fmt.Errorf("create the registry bucket %s: %w", Bucket, err)
	}
	r, err := reg.Raw().GetKey(ctx, &registryv1.GetKeyRequest{Bucket: Bucket, Key: DecisionKey})
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound:
		return 0, nil
	default:
		return 0, fmt.Errorf("read the last decision: %w", err)
	}
	d, err := core.DecodeDecision(r.GetKv().GetValue())
	if err != nil {
		return 0, fmt.Errorf("the last decision in the registry (bucket %s, key %s): %w", Bucket, DecisionKey, err)
	}
	return d.ID, nil
}
