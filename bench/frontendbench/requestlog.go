package frontendbench

import (
	"context"
	"encoding/binary"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Request is one request of a flow as the bench saw it and, when the
// stack records its requests (OverloadConfig.Record), as the frontend
// handled it.
type Request struct {
	// ID is the request's number in the run (its prompt's key).
	ID uint64
	// Frontend is the index of the frontend it was sent to.
	Frontend int
	// Sent is when it was sent, from the flows' start.
	Sent time.Duration
	// Status is how it ended: ok, shed (503, the queue full), shed-timeout
	// (503 past --queue-timeout), 429 or error.
	Status string
	// TTFT is the client's time to first token (ok only).
	TTFT time.Duration
	// RetryAfter is a shed request's Retry-After in seconds.
	RetryAfter int
	// Traced: the fields below are the frontend's (OverloadConfig.Record).
	Traced bool
	// Routed is when the frontend first asked the router where to send it
	// (once admission control let it go), from the flows' start; Decided
	// when the router answered; Worker the instance it chose (hex).
	Routed, Decided time.Duration
	Worker          string
	// FirstToken is when the frontend had its first token, from the flows'
	// start.
	FirstToken time.Duration
}

// spanLog keeps, per trace, the frontend's route decision (its first
// attempt's) and first token: the times at which a request left the
// admission queue, was placed and got its first token. The bench sends
// each request with a traceparent of its own, so that it finds them by
// the trace id it chose. Only these two spans are kept, a few words
// each; everything else ends unrecorded.
type spanLog struct {
	mu sync.Mutex
	m  map[trace.TraceID]*spanRecord
}

type spanRecord struct {
	routed, decided, firstToken time.Time
	worker                      string
}

func (l *spanLog) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (l *spanLog) Shutdown(context.Context) error                  { return nil }
func (l *spanLog) ForceFlush(context.Context) error                { return nil }

func (l *spanLog) OnEnd(s sdktrace.ReadOnlySpan) {
	name := s.Name()
	if name != "frontend.route" && name != "frontend.first_token" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.m[s.SpanContext().TraceID()]
	if r == nil {
		r = &spanRecord{}
		l.m[s.SpanContext().TraceID()] = r
	}
	if name == "frontend.first_token" {
		r.firstToken = s.EndTime()
		return
	}
	attempt, worker := int64(-1), ""
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case "switchyard.attempt":
			attempt = kv.Value.AsInt64()
		case "switchyard.instance_id":
			worker = kv.Value.AsString()
		}
	}
	if attempt == 0 {
		r.routed, r.decided, r.worker = s.StartTime(), s.EndTime(), worker
	}
}

// take removes and returns the record of trace id (nil: none).
func (l *spanLog) take(id trace.TraceID) *spanRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.m[id]
	delete(l.m, id)
	return r
}

// requestSpans is the process's span log, installed as the global tracer
// provider by the first stack that records its requests (the frontend's
// tracer is the global one). A recorded request is routed with a unary
// Route call rather than on the frontend's RouteStream (so that the
// router's spans would join its trace): the same decision, a call's
// round trip apart.
var (
	requestSpans     *spanLog
	requestSpansOnce sync.Once
)

func installSpanLog() {
	requestSpansOnce.Do(func() {
		requestSpans = &spanLog{m: map[trace.TraceID]*spanRecord{}}
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(requestSpans),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
		otel.SetTextMapPropagator(propagation.TraceContext{})
	})
}

// traceOf is the trace id the bench gives request id of a stack: unique
// over the process's stacks (stack numbers them).
func traceOf(stack, id uint64) trace.TraceID {
	var t trace.TraceID
	binary.BigEndian.PutUint64(t[:8], stack+1)
	binary.BigEndian.PutUint64(t[8:], id)
	return t
}

// traceparent is the W3C traceparent header of a sampled request in trace
// t.
func traceparent(t trace.TraceID, id uint64) string {
	var sp trace.SpanID
	binary.BigEndian.PutUint64(sp[:], id|1)
	return fmt.Sprintf("00-%s-%s-01", t, sp)
}

// fillTraced adds the frontend's side to the requests of a run that began
// at start.
func (e *OverloadEnv) fillTraced(rs []FlowResult, start time.Time) {
	if !e.record {
		return
	}
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return -1
		}
		return t.Sub(start)
	}
	for i := range rs {
		for j := range rs[i].Requests {
			q := &rs[i].Requests[j]
			r := requestSpans.take(traceOf(e.stack, q.ID))
			if r == nil {
				continue
			}
			q.Traced = true
			q.Routed, q.Decided, q.Worker, q.FirstToken = since(r.routed), since(r.decided), r.worker, since(r.firstToken)
		}
	}
}

// RequestCSVHeader is the header of WriteRequestCSV's rows.
const RequestCSVHeader = "scenario,admission,run,flow,tenant,priority,frontend,request,sent_s,status,ttft_ms,retry_after_s,routed_s,decided_s,worker,first_token_s"

// WriteRequestCSV writes one row per request of rs (flows' results in a
// run of scenario): the columns of RequestCSVHeader; times in seconds from
// the flows' start, the frontend's columns empty when it was not recorded
// (or the request never reached the router). A field with a comma (the
// scenario "tenants, 2 frontends") is quoted.
func WriteRequestCSV(out io.Writer, scenario, admission string, run int, flows []Flow, rs []FlowResult) error {
	w := csv.NewWriter(out)
	secs := func(d time.Duration) string {
		if d < 0 {
			return ""
		}
		return strconv.FormatFloat(d.Seconds(), 'f', 4, 64)
	}
	for i, r := range rs {
		f := flows[i]
		for _, q := range r.Requests {
			ttft := ""
			if q.Status == "ok" {
				ttft = strconv.FormatFloat(float64(q.TTFT.Microseconds())/1000, 'f', 1, 64)
			}
			retry := ""
			if q.Status == "shed" || q.Status == "shed-timeout" {
				retry = strconv.Itoa(q.RetryAfter)
			}
			routed, decided, first := "", "", ""
			if q.Traced {
				routed, decided, first = secs(q.Routed), secs(q.Decided), secs(q.FirstToken)
			}
			if err := w.Write([]string{scenario, admission, strconv.Itoa(run), r.Name, f.Tenant, strconv.Itoa(f.Priority),
				strconv.Itoa(q.Frontend), strconv.FormatUint(q.ID, 10), secs(q.Sent), q.Status, ttft, retry, routed, decided, q.Worker, first}); err != nil {
				return err
			}
		}
	}
	w.Flush()
	return w.Error()
}
