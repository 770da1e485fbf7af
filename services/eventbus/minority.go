package eventbus

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// A NATS server cut from the rest of its cluster still answers its own
// clients: nats.go sees a healthy connection and stays on it, while every
// JetStream call through that server fails (it has no meta leader and no
// stream quorum) for as long as the cut lasts, even though the servers on
// the majority side serve. jsWatch notices that from the client side: it
// asks, through the connection, for the account's JetStream info, and after
// jsWatchFailures failures in a row on a connection that is CONNECTED and
// knows other servers, it makes the connection reconnect, which nats.go
// does to the next server of its pool. The eventbus's publisher resends
// what was unanswered (message ids keep it stored once) and subscriptions
// resume after the reconnection as after any other.

// jsWatchInterval is how often each connection is asked; a question
// unanswered within it fails.
const jsWatchInterval = time.Second

// jsWatchFailures is how many failed questions in a row make a connection
// move: JetStream elects a new stream leader within a few seconds, and a
// server that is only slow must not be left.
const jsWatchFailures = 3

// jsWatch watches one NATS connection (see above).
type jsWatch struct {
	name string // which connection, for the log
	// check asks the connected server's cluster for JetStream account info.
	check func(context.Context) error
	// connected tells whether the connection is up (not reconnecting).
	connected func() bool
	// others tells whether the connection knows a server besides the one
	// it is on.
	others    func() bool
	reconnect func() error
	moved     prometheus.Counter
	log       *slog.Logger
	interval  time.Duration
}

// newJSWatch watches nc; moves counts its forced reconnections.
func newJSWatch(name string, nc *nats.Conn, moves prometheus.Counter, log *slog.Logger) (*jsWatch, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &jsWatch{
		name: name,
		check: func(ctx context.Context) error {
			_, err := js.AccountInfo(ctx)
			return err
		},
		connected: func() bool { return nc.Status() == nats.CONNECTED },
		others:    func() bool { return len(nc.Servers()) > 1 },
		reconnect: nc.ForceReconnect,
		moved:     moves,
		log:       log,
		interval:  jsWatchInterval,
	}, nil
}

// run asks every interval until ctx ends.
func (w *jsWatch) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	failed := 0 // failures in a row while connected
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !w.connected() {
			failed = 0 // nats.go is reconnecting already
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, w.interval)
		err := w.check(qctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failed = 0
			continue
		}
		if failed++; failed < jsWatchFailures || !w.others() {
			continue
		}
		failed = 0
		w.log.Warn("JetStream does not answer through the NATS server this connection is on (cut from its cluster?); reconnecting to another server",
			"connection", w.name, "failures", jsWatchFailures, "err", err.Error())
		if err := w.reconnect(); err != nil {
			w.log.Warn("NATS reconnection not started", "connection", w.name, "err", err.Error())
			continue
		}
		w.moved.Inc()
	}
}

// newMovesCounter is switchyard_eventbus_nats_moves_total.
func newMovesCounter(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_eventbus_nats_moves_total",
		Help: "NATS connections the eventbus moved to another server because JetStream stopped answering through the one they were on (a server cut from its cluster).",
	})
	reg.MustRegister(c)
	return c
}
