// Package eventbusclient is the Go client of Switchyard's eventbus
// (switchyard.eventbus.v1.EventBusService). It dials several eventbus
// addresses and fails over between them, retries publishes (made idempotent by
// a message id it generates when the caller gives none), pipelines batched
// publishes, resumes subscriptions after an eventbus or NATS restart, and
// checks object data against its sha256. Payloads are protobuf messages:
// proto.Message in, Decode out.
package eventbusclient

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/nats-io/nuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Options tunes a Client. The zero value is plaintext with default backoff.
type Options struct {
	// Credentials secure the connections; nil means plaintext (see
	// tlsconfig.Config.ClientCredentials).
	Credentials credentials.TransportCredentials
	// Log receives reconnection notices; nil discards them.
	Log *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between retries; zero means
	// 50ms and 2s.
	MinBackoff, MaxBackoff time.Duration
	// DialOptions are appended to the client's own.
	DialOptions []grpc.DialOption
	// Token sends a bearer token on every call; nil sends none (see
	// grpcclient.Options).
	Token credentials.PerRPCCredentials
}

// Client is a connection to one or more eventbus replicas. Calls go to the
// first reachable address and fail over to the next when it goes away.
type Client struct {
	conn *grpc.ClientConn
	raw  eventbusv1.EventBusServiceClient
	log  *slog.Logger
	min  time.Duration
	max  time.Duration
}

// maxMessageSize matches services/eventbus.MaxMessageSize: one event at
// NATS's largest max_payload with its envelope. (This package does not import
// the server's, which would pull nats-server into every client.)
const maxMessageSize = 65 << 20

// Dial connects to the eventbus replicas at addrs (host:port each, or
// comma-separated lists of them), through pkg/grpcclient. It does not wait
// for a connection: calls wait until one is ready or their context ends.
func Dial(addrs []string, opts Options) (*Client, error) {
	gopts := grpcclient.Options{Credentials: opts.Credentials, Log: opts.Log, DialOptions: opts.DialOptions, Token: opts.Token}
	conn, err := grpcclient.Dial("eventbus", addrs, gopts,
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)))
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, raw: eventbusv1.NewEventBusServiceClient(conn), log: gopts.Logger(), min: opts.MinBackoff, max: opts.MaxBackoff}
	if c.min <= 0 {
		c.min = 50 * time.Millisecond
	}
	if c.max <= 0 {
		c.max = 2 * time.Second
	}
	return c, nil
}

// Close closes the connections. Subscriptions and publishers should be
// closed first.
func (c *Client) Close() error { return c.conn.Close() }

// Raw is the generated client, for calls this package does not wrap.
func (c *Client) Raw() eventbusv1.EventBusServiceClient { return c.raw }

// Health asks the eventbus replica the client is connected to for its gRPC
// health, on the client's own connection: nil when it answers SERVING,
// which the eventbus does only while it reaches NATS. Unlike the other calls
// it does not wait for a connection: with none ready it fails at once, and
// on a connection that no longer carries packets it fails when ctx ends.
func (c *Client) Health(ctx context.Context) error {
	r, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return err
	}
	if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("eventbus health is %s", r.GetStatus())
	}
	return nil
}

// retryable reports whether a call may succeed when tried again, on this
// eventbus or another: the server is unreachable, restarting or cannot reach
// NATS right now.
func retryable(err error) bool {
	// Not ResourceExhausted: gRPC uses it for a message over the size
	// limit, which no retry fixes.
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted:
		return true
	}
	return false
}

// backoff is a retry loop's jittered backoff between the client's bounds.
func (c *Client) backoff() *backoff.Backoff {
	return backoff.New(backoff.Policy{Min: c.min, Max: c.max})
}

// retry calls f until it succeeds, fails for good or ctx ends, backing off
// between attempts.
func (c *Client) retry(ctx context.Context, op string, f func() error) error {
	bo := c.backoff()
	for {
		err := f()
		if err == nil || !retryable(err) {
			return err
		}
		wait := bo.Next()
		c.log.Debug("eventbus call failed; retrying", "op", op, "err", err.Error(), "in", wait.String())
		if backoff.Sleep(ctx, wait) != nil {
			return fmt.Errorf("%s: %w (last error: %w)", op, ctx.Err(), err)
		}
	}
}

// PublishOption tunes one publish.
type PublishOption func(*eventbusv1.Event)

// WithMsgID sets the message id that makes retries idempotent; by default
// each publish gets a unique one.
func WithMsgID(id string) PublishOption { return func(e *eventbusv1.Event) { e.MsgId = id } }

// WithHeaders sets the event's headers.
func WithHeaders(h map[string]string) PublishOption {
	return func(e *eventbusv1.Event) { e.Headers = h }
}

// NewEvent builds an event from a protobuf message, with a fresh message id
// unless an option sets one, and with the header wire.HeaderType naming the
// message's type (added to the headers an option sets, never replacing one
// the caller set).
func NewEvent(subject string, msg proto.Message, opts ...PublishOption) (*eventbusv1.Event, error) {
	payload, err := proto.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("eventbus: marshal %T: %w", msg, err)
	}
	ev := &eventbusv1.Event{Subject: subject, Payload: payload, MsgId: nuid.Next()}
	for _, o := range opts {
		o(ev)
	}
	if _, ok := ev.Headers[wire.HeaderType]; !ok {
		h := make(map[string]string, len(ev.Headers)+1)
		maps.Copy(h, ev.Headers)
		h[wire.HeaderType] = wire.TypeName(msg)
		ev.Headers = h
	}
	return ev, nil
}

// Publish publishes a protobuf message on subject, retrying through
// failovers until ctx ends. Retries carry the same message id, so the event is
// stored once.
func (c *Client) Publish(ctx context.Context, subject string, msg proto.Message, opts ...PublishOption) (*eventbusv1.PublishResponse, error) {
	ev, err := NewEvent(subject, msg, opts...)
	if err != nil {
		return nil, err
	}
	return c.PublishEvent(ctx, ev)
}

// PublishEvent publishes a prepared event, retrying like Publish. An event
// without a message id is given one first.
func (c *Client) PublishEvent(ctx context.Context, ev *eventbusv1.Event) (*eventbusv1.PublishResponse, error) {
	if ev.GetMsgId() == "" {
		ev = proto.CloneOf(ev)
		ev.MsgId = nuid.Next()
	}
	var resp *eventbusv1.PublishResponse
	err := c.retry(ctx, "publish", func() error {
		var err error
		resp, err = c.raw.Publish(ctx, &eventbusv1.PublishRequest{Event: ev})
		return err
	})
	return resp, err
}

// Decode unmarshals an event's payload into a new T.
func Decode[T any, P interface {
	*T
	proto.Message
}](ev *eventbusv1.DeliveredEvent) (P, error) {
	var m P = new(T)
	if err := wire.CheckType(ev.GetHeaders(), m); err != nil {
		return nil, fmt.Errorf("eventbus: event %d on %s: %w", ev.GetStreamSequence(), ev.GetSubject(), err)
	}
	if err := proto.Unmarshal(ev.GetPayload(), m); err != nil {
		return nil, fmt.Errorf("eventbus: decode event %d on %s as %T: %w", ev.GetStreamSequence(), ev.GetSubject(), m, err)
	}
	return m, nil
}

// Settled is the highest stream sequence whose events have all been
// delivered once ev has: ev's own, or the one before when the eventbus
// stored ev together with events that follow it (wire.HeaderEnvelopeRest).
// A consumer that resumes after the last sequence it settled misses
// nothing.
func Settled(ev *eventbusv1.DeliveredEvent) uint64 {
	if ev.GetHeaders()[wire.HeaderEnvelopeRest] != "" {
		return ev.GetStreamSequence() - 1
	}
	return ev.GetStreamSequence()
}

// Ack acknowledges events (those delivered without auto_ack), retrying
// through failovers: any eventbus can acknowledge any event.
func (c *Client) Ack(ctx context.Context, evs ...*eventbusv1.DeliveredEvent) error {
	return c.ackOrNak(ctx, false, evs)
}

// Nak hands events back for redelivery at once.
func (c *Client) Nak(ctx context.Context, evs ...*eventbusv1.DeliveredEvent) error {
	return c.ackOrNak(ctx, true, evs)
}

func (c *Client) ackOrNak(ctx context.Context, nak bool, evs []*eventbusv1.DeliveredEvent) error {
	req := &eventbusv1.AckRequest{Nak: nak, AckTokens: make([]string, 0, len(evs))}
	for _, ev := range evs {
		if ev.GetAckToken() == "" {
			return fmt.Errorf("eventbus: event %d has no ack token (auto_ack subscription?)", ev.GetStreamSequence())
		}
		req.AckTokens = append(req.AckTokens, ev.GetAckToken())
	}
	return c.retry(ctx, "ack", func() error {
		_, err := c.raw.Ack(ctx, req)
		return err
	})
}
