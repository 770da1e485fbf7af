// Package eventbusbench measures the eventbus against NATS JetStream used
// directly: publish -> deliver throughput of batched small events, and the
// latency of one event at a time, both through the same nats-server. The
// Benchmark functions and cmd/eventbus-bench share it.
package eventbusbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/services/eventbus"
)

// EventSize is the payload size of every benchmark event, in bytes.
const EventSize = 200

// Env is a nats-server with JetStream (file storage), an eventbus in front of
// it, a client of the eventbus and a direct NATS connection.
type Env struct {
	ns     *natsserver.Server
	svc    *eventbus.Service
	client *eventbusclient.Client
	nc     *nats.Conn
	js     jetstream.JetStream
	runs   atomic.Uint64
}

// Start starts the environment, storing JetStream under dir. With embedded,
// the eventbus runs its own nats-server (its default, reached in process) and
// the direct client connects to it over TCP; otherwise the nats-server is a
// separate one that both reach over TCP.
func Start(dir string, embedded bool, log *slog.Logger) (*Env, error) {
	e := &Env{}
	cfg := eventbus.Config{
		Server:       grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second},
		StreamMaxAge: time.Hour,
	}
	var err error
	if embedded {
		cfg.DataDir, cfg.EmbeddedNATSPort = dir, -1
	} else {
		if e.ns, err = eventbus.StartEmbeddedNATS(dir, -1, log); err != nil {
			return nil, err
		}
		cfg.NATSServer = e.ns.ClientURL()
	}
	if e.svc, err = eventbus.Start(context.Background(), cfg, log); err != nil {
		e.Close()
		return nil, err
	}
	if e.client, err = eventbusclient.Dial([]string{e.svc.Addr().String()}, eventbusclient.Options{Log: log}); err != nil {
		e.Close()
		return nil, err
	}
	if e.nc, err = nats.Connect(e.svc.NATSURL()); err != nil {
		e.Close()
		return nil, err
	}
	if e.js, err = jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(8192)); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close stops everything Start started.
func (e *Env) Close() {
	if e.client != nil {
		e.client.Close()
	}
	if e.nc != nil {
		e.nc.Close()
	}
	if e.svc != nil {
		_ = e.svc.Stop()
	}
	if e.ns != nil {
		e.ns.Shutdown()
		e.ns.WaitForShutdown()
	}
}

// Path is a way from publisher to subscriber.
type Path string

// The two paths compared.
const (
	ViaEventbus Path = "eventbus (gRPC)"
	DirectNATS  Path = "nats.go direct"
)

// namespace is a fresh namespace, so that runs do not see each other's events.
func (e *Env) namespace(p Path) string {
	kind := "eb"
	if p == DirectNATS {
		kind = "js"
	}
	return fmt.Sprintf("bench-%s-%d", kind, e.runs.Add(1))
}

// stamp is a 200-byte payload carrying its send time.
func stamp() []byte {
	b := make([]byte, EventSize)
	binary.LittleEndian.PutUint64(b, uint64(time.Now().UnixNano()))
	return b
}

// subscriber is a running subscription of either path; stop ends it and
// waits for its goroutines.
type subscriber interface {
	stop()
}

type ebSub struct {
	sub  *eventbusclient.Subscription
	done chan struct{}
}

func (s ebSub) stop() {
	_ = s.sub.Close()
	<-s.done
}

// subscribe starts receiving a namespace's new events, calling got for each;
// it returns once the subscription receives.

func (e *Env) subscribe(ctx context.Context, p Path, ns string, got func([]byte)) (subscriber, error) {
	if p == ViaEventbus {
		sub, err := e.client.Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: ns, AutoAck: true})
		if err != nil {
			return nil, err
		}
		s := ebSub{sub: sub, done: make(chan struct{})}
		go func() {
			defer close(s.done)
			for {
				ev, err := sub.Next(context.Background())
				if err != nil {
					return
				}
				got(ev.GetPayload())
			}
		}()
		return s, nil
	}
	st, err := e.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: eventbus.StreamName(ns), Subjects: []string{ns + ".>"}, Storage: jetstream.FileStorage, MaxAge: time.Hour, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { got(m.Data()) }, jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, err
	}
	return jsSub{cc}, nil
}

type jsSub struct{ cc jetstream.ConsumeContext }

func (s jsSub) stop() {
	s.cc.Stop()
	<-s.cc.Closed()
}

// Throughput publishes n events in batches of batch (with up to inFlight
// batches unacknowledged) and returns how many were delivered per second,
// from the first publish to the last delivery. With dedup each event carries
// a message id, as the eventbus client gives by default.
func (e *Env) Throughput(ctx context.Context, p Path, n, batch, inFlight int, dedup bool) (float64, error) {
	ns := e.namespace(p)
	subject := ns + ".bench.event"
	var delivered atomic.Int64
	done := make(chan struct{})
	sub, err := e.subscribe(ctx, p, ns, func([]byte) {
		if delivered.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		return 0, err
	}
	defer sub.stop()
	payload := stamp()
	start := time.Now()
	if p == ViaEventbus {
		pub := e.client.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: inFlight, NoMsgIDs: !dedup})
		defer pub.Close()
		var pending []*eventbusclient.Batch
		for sent := 0; sent < n; {
			k := min(batch, n-sent)
			evs := make([]*eventbusv1.Event, k)
			for i := range evs {
				evs[i] = &eventbusv1.Event{Subject: subject, Payload: payload}
				if dedup {
					evs[i].MsgId = fmt.Sprintf("%s-%d", ns, sent+i)
				}
			}
			sent += k
			b, err := pub.Send(ctx, evs)
			if err != nil {
				return 0, err
			}
			pending = append(pending, b)
			if len(pending) >= inFlight {
				if _, err := pending[0].Wait(ctx); err != nil {
					return 0, err
				}
				pending = pending[1:]
			}
		}
		for _, b := range pending {
			if _, err := b.Wait(ctx); err != nil {
				return 0, err
			}
		}
	} else {
		for i := 0; i < n; i++ {
			m := nats.NewMsg(subject)
			m.Data = payload
			opts := []jetstream.PublishOpt{jetstream.WithStallWait(10 * time.Second)}
			if dedup {
				opts = append(opts, jetstream.WithMsgID(fmt.Sprintf("%s-%d", ns, i)))
			}
			if _, err := e.js.PublishMsgAsync(m, opts...); err != nil {
				return 0, err
			}
		}
		select {
		case <-e.js.PublishAsyncComplete():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, fmt.Errorf("%s: %d of %d events delivered: %w", p, delivered.Load(), n, ctx.Err())
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Latency publishes samples events one at a time, each after the previous
// one was delivered, and returns the publish -> deliver latencies, sorted.
func (e *Env) Latency(ctx context.Context, p Path, samples int) ([]time.Duration, error) {
	lat, err := e.Latencies(ctx, []Path{p}, samples, 1)
	return lat[p], err
}

// Latencies measures the latency of several paths as Latency does, in rounds
// that take turns between the paths, so that the drift of a shared machine
// weighs on every path alike. It returns each path's samples, sorted.
func (e *Env) Latencies(ctx context.Context, paths []Path, samples, rounds int) (map[Path][]time.Duration, error) {
	probes := make([]*latencyProbe, len(paths))
	defer func() {
		for _, pr := range probes {
			if pr != nil {
				pr.close()
			}
		}
	}()
	for i, p := range paths {
		pr, err := e.newProbe(ctx, p)
		if err != nil {
			return nil, err
		}
		probes[i] = pr
	}
	out := map[Path][]time.Duration{}
	for r := 0; r < rounds; r++ {
		n := samples / rounds
		if r == rounds-1 {
			n = samples - r*(samples/rounds)
		}
		for i, pr := range probes {
			var err error
			if out[paths[i]], err = pr.sample(ctx, n, out[paths[i]]); err != nil {
				return nil, err
			}
		}
	}
	for _, lat := range out {
		slices.Sort(lat)
	}
	return out, nil
}

// latencyProbe publishes one event at a time on a path and times its
// delivery.
type latencyProbe struct {
	e       *Env
	path    Path
	ns      string
	sub     subscriber
	pub     *eventbusclient.Publisher // ViaEventbus only
	arrived chan time.Duration
	sent    int
}

func (e *Env) newProbe(ctx context.Context, p Path) (*latencyProbe, error) {
	pr := &latencyProbe{e: e, path: p, ns: e.namespace(p), arrived: make(chan time.Duration, 1)}
	sub, err := e.subscribe(ctx, p, pr.ns, func(b []byte) {
		pr.arrived <- time.Duration(time.Now().UnixNano() - int64(binary.LittleEndian.Uint64(b)))
	})
	if err != nil {
		return nil, err
	}
	pr.sub = sub
	if p == ViaEventbus {
		// A publisher keeps its stream open, as a real event source does.
		pr.pub = e.client.NewPublisher(ctx, eventbusclient.PublisherOptions{MaxInFlight: 1})
	}
	return pr, nil
}

// sample times n more events and appends their latencies to out.
func (pr *latencyProbe) sample(ctx context.Context, n int, out []time.Duration) ([]time.Duration, error) {
	subject := pr.ns + ".bench.event"
	for range n {
		payload := stamp()
		id := fmt.Sprintf("%s-%d", pr.ns, pr.sent)
		pr.sent++
		var err error
		if pr.path == ViaEventbus {
			_, err = pr.pub.PublishBatch(ctx, []*eventbusv1.Event{{Subject: subject, Payload: payload, MsgId: id}})
		} else {
			m := nats.NewMsg(subject)
			m.Data = payload
			_, err = pr.e.js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		}
		if err != nil {
			return out, err
		}
		select {
		case d := <-pr.arrived:
			out = append(out, d)
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

func (pr *latencyProbe) close() {
	if pr.pub != nil {
		pr.pub.Close()
	}
	pr.sub.stop()
}

// Percentile is the q-th quantile (0-1) of sorted durations.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// TempDir makes a directory for the JetStream store; remove it after Close.
func TempDir() (string, error) {
	dir, err := os.MkdirTemp("", "eventbus-bench-")
	if err != nil {
		return "", errors.New("eventbusbench: " + err.Error())
	}
	return dir, nil
}
