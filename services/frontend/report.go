package frontend

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
)

// The router service learns of a routed request's first token and end from
// batches on one Report stream per frontend (router.proto), not from two
// unary calls per request: with the Route call, a request costs the router
// one round trip instead of three. Reports are fire and forget, as the unary
// calls' errors were only logged. A router without Report (an older one)
// gets the unary calls.

// reportQueue bounds the reports waiting for the stream; past it a request
// waits for room rather than dropping a report (which would leave load on a
// worker in the router's books).
const reportQueue = 4096

// maxReportBatch bounds the ids of one batch.
const maxReportBatch = 1024

type reportItem struct {
	id   string
	free bool
}

// reporter sends reports to the router service on a Report stream, batching
// what queues up while a batch is being sent.
type reporter struct {
	client routerv1.RouterServiceClient
	log    *slog.Logger

	mu     sync.RWMutex // held for reading by add, for writing by close
	closed bool
	ch     chan reportItem
	done   chan struct{}
	// unary is set once the router answered Report with Unimplemented.
	unary atomic.Bool
	// batches counts the batches sent on the stream (for tests).
	batches atomic.Uint64
}

func newReporter(client routerv1.RouterServiceClient, log *slog.Logger) *reporter {
	r := &reporter{client: client, log: log, ch: make(chan reportItem, reportQueue), done: make(chan struct{})}
	go r.run()
	return r
}

// add queues a report of request id: its end when free, else its first
// token.
func (r *reporter) add(id string, free bool) {
	if r.unary.Load() {
		r.sendUnary(id, free)
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		r.log.Debug("report after the router client closed", "request_id", id)
		return
	}
	r.ch <- reportItem{id: id, free: free}
}

// close sends what is queued, closes the stream and waits for both.
func (r *reporter) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	<-r.done
}

func (r *reporter) run() {
	defer close(r.done)
	var st *reportStream
	defer func() { _ = st.close() }()
	for item := range r.ch {
		batch := &routerv1.ReportRequest{}
		addReport(batch, item)
	drain:
		for len(batch.PrefillComplete)+len(batch.Free) < maxReportBatch {
			select {
			case it, ok := <-r.ch:
				if !ok {
					break drain
				}
				addReport(batch, it)
			default:
				break drain
			}
		}
		st = r.send(st, batch)
	}
}

// send sends batch on st, opening a stream when there is none and once more
// when st turns out broken. It returns the stream to use next.
func (r *reporter) send(st *reportStream, batch *routerv1.ReportRequest) *reportStream {
	if r.unary.Load() {
		r.sendBatchUnary(batch)
		return st
	}
	for attempt := 0; attempt < 2; attempt++ {
		var err error
		if st == nil {
			st, err = openReportStream(r.client)
		}
		if err == nil {
			if err = st.stream.Send(batch); err == nil {
				r.batches.Add(1)
				return st
			}
			// Send says only that the stream broke; its status says why.
			err = st.close()
		}
		st = nil
		if status.Code(err) == codes.Unimplemented {
			r.log.Info("the router has no Report stream; reporting with unary calls")
			r.unary.Store(true)
			r.sendBatchUnary(batch)
			return nil
		}
		r.log.Debug("report stream broke", "err", err)
	}
	r.log.Warn("router reports dropped: the Report stream is unavailable", "requests", len(batch.PrefillComplete)+len(batch.Free))
	return nil
}

func (r *reporter) sendBatchUnary(b *routerv1.ReportRequest) {
	for _, id := range b.PrefillComplete {
		r.sendUnary(id, false)
	}
	for _, id := range b.Free {
		r.sendUnary(id, true)
	}
}

func (r *reporter) sendUnary(id string, free bool) {
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	var err error
	if free {
		_, err = r.client.Free(ctx, &routerv1.FreeRequest{RequestId: id})
	} else {
		_, err = r.client.MarkPrefillComplete(ctx, &routerv1.MarkPrefillCompleteRequest{RequestId: id})
	}
	if err != nil {
		r.log.Debug("router report failed", "request_id", id, "free", free, "err", err.Error())
	}
}

// reportStream is one open Report stream and the context that ends it.
type reportStream struct {
	stream routerv1.RouterService_ReportClient
	cancel context.CancelFunc
}

func openReportStream(client routerv1.RouterServiceClient) (*reportStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := client.Report(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &reportStream{stream: s, cancel: cancel}, nil
}

// close closes the stream, waiting at most reportTimeout for the router's
// answer, and returns the stream's final error (nil when it ended well).
func (s *reportStream) close() error {
	if s == nil {
		return nil
	}
	t := time.AfterFunc(reportTimeout, s.cancel)
	defer t.Stop()
	defer s.cancel()
	_, err := s.stream.CloseAndRecv()
	return err
}

func addReport(b *routerv1.ReportRequest, it reportItem) {
	if it.free {
		b.Free = append(b.Free, it.id)
	} else {
		b.PrefillComplete = append(b.PrefillComplete, it.id)
	}
}
