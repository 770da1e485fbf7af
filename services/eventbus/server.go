package eventbus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// ConsumerHeader is the response header in which Subscribe names its
// consumer as soon as it exists.
const ConsumerHeader = "eventbus-consumer"

// server implements EventBusService over a bus and an object store.
type server struct {
	eventbusv1.UnimplementedEventBusServiceServer
	bus      *bus
	objects  *objects
	metrics  *metrics
	stopping <-chan struct{}
	// watchSlot bounds each client's open subscriptions
	// (grpcserver.WatchSlot).
	watchSlot func(context.Context) (func(), error)
	// pace is the publish interval each answer asks for.
	pace *pacer
}

// statusCodes maps the domain errors to the gRPC codes and apierr reasons
// eventbus.proto documents; the specific cases come before the errors they
// wrap.
var statusCodes = []grpcserver.Code{
	{Err: ErrPayloadTooLarge, Code: codes.InvalidArgument, Reason: apierr.ReasonPayloadTooLarge},
	{Err: ErrInvalid, Code: codes.InvalidArgument},
	{Err: ErrObjectNotFound, Code: codes.NotFound, Reason: apierr.ReasonObjectNotFound},
	{Err: ErrNotFound, Code: codes.NotFound},
	{Err: ErrDataLoss, Code: codes.DataLoss, Reason: apierr.ReasonChecksumMismatch},
	{Err: ErrBufferFull, Code: codes.Unavailable, Reason: apierr.ReasonReconnectBufferFull},
	{Err: ErrUnavailable, Code: codes.Unavailable, Reason: apierr.ReasonBackendUnavailable},
}

// toStatus maps a domain error to its gRPC status, once for every RPC.
func toStatus(err error) error { return grpcserver.ToStatus(err, statusCodes) }

// maxPayload is the connected NATS server's max_payload.
func (s *server) maxPayload() int64 { return s.bus.nc.MaxPayload() }

// Publish implements EventBusService.
func (s *server) Publish(ctx context.Context, req *eventbusv1.PublishRequest) (*eventbusv1.PublishResponse, error) {
	ns, err := validateEvent(req.GetEvent(), s.maxPayload())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := grpcserver.CheckNamespace(ctx, ns); err != nil {
		return nil, err
	}
	if req.GetCore() {
		if err := s.bus.publishCore([]*eventbusv1.Event{req.GetEvent()}); err != nil {
			return nil, toStatus(err)
		}
		s.metrics.countPublished(ns, false, 1)
		return &eventbusv1.PublishResponse{}, nil
	}
	var ack pubAck
	if evs := []*eventbusv1.Event{req.GetEvent()}; s.bus.coalesce.takes(evs) {
		var mb *mergedBatch
		var acks []pubAck
		if mb, err = s.bus.coalesce.add(ctx, []string{ns}, evs); err == nil {
			acks, err = mb.wait(ctx, nil)
		}
		if err != nil {
			return nil, toStatus(err)
		}
		ack = acks[0]
	} else if ack, err = s.bus.publish(ctx, ns, req.GetEvent()); err != nil {
		return nil, toStatus(err)
	}
	s.metrics.countPublished(ns, ack.dup, 1)
	return &eventbusv1.PublishResponse{Stream: StreamName(ns), Sequence: ack.seq, Duplicate: ack.dup}, nil
}

// pendingBatch is a batch whose publishes have started.
type pendingBatch struct {
	id    uint64
	nss   []string // namespace of each event
	batch *pubBatch
	// merged is the batch when the coalescer took it (batch is nil).
	merged *mergedBatch
	// core batches are already published: their acks are all zero.
	core bool
}

// PublishStream implements EventBusService. A receiving goroutine validates
// batches and starts their publishes; the handler waits for the
// acknowledgements and answers in order, so that batches are pipelined. The
// receiver ends with the stream: its Recv fails once the handler has
// returned. On shutdown the handler ends the stream with UNAVAILABLE at once;
// the client sends the unanswered batches again elsewhere, and their message
// ids keep them from being stored twice.
func (s *server) PublishStream(stream eventbusv1.EventBusService_PublishStreamServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	queue := make(chan pendingBatch, 64)
	recvErr := make(chan error, 1)
	go func() {
		recvErr <- s.receiveBatches(ctx, stream, queue)
		close(queue)
	}()
	defer func() {
		// Batches published and not answered when the stream ends: no one
		// waits for them any more; settling frees their room and stops
		// their resending. The receiver closes queue once the stream ends.
		go func() {
			for p := range queue {
				if p.batch != nil {
					s.bus.pub.settle(p.batch, context.Canceled)
				}
			}
		}()
	}()
	counts := publishedCounters{m: s.metrics}
	paced := s.pace.open()
	defer s.pace.done(paced)
	var interval durationpb.Duration
	// The answer is encoded by Send before it returns, so one response
	// and its acknowledgements serve every batch of the stream.
	var (
		ackBuf []pubAck
		resp   eventbusv1.PublishStreamResponse
		vals   []eventbusv1.PublishAck
		err    error
	)
	for {
		select {
		case <-s.stopping:
			return toStatus(fmt.Errorf("%w: eventbus is shutting down; publish to another", ErrUnavailable))
		case p, ok := <-queue:
			if !ok {
				return toStatus(<-recvErr)
			}
			var acks []pubAck
			switch {
			case p.core:
				acks = make([]pubAck, len(p.nss))
			case p.merged != nil:
				if acks, err = p.merged.wait(ctx, ackBuf); err != nil {
					return toStatus(err)
				}
				ackBuf = acks
			default:
				if acks, err = s.bus.waitBatch(ctx, p.batch); err != nil {
					return toStatus(err)
				}
			}
			counts.countBatch(p.nss, acks)
			if len(acks) > len(vals) {
				vals = make([]eventbusv1.PublishAck, len(acks))
				resp.Acks = make([]*eventbusv1.PublishAck, len(acks))
				for i := range vals {
					resp.Acks[i] = &vals[i]
				}
			}
			resp.BatchId, resp.Acks = p.id, resp.Acks[:len(acks)]
			for i, a := range acks {
				vals[i].Sequence, vals[i].Duplicate = a.seq, a.dup
			}
			resp.PublishInterval = nil
			if iv := s.pace.received(paced, time.Now()); iv > 0 {
				interval.Seconds, interval.Nanos = int64(iv/time.Second), int32(iv%time.Second)
				resp.PublishInterval = &interval
			}
			if err := stream.Send(&resp); err != nil {
				return err
			}
		}
	}
}

// receiveBatches reads batches until the client closes its side (nil) or
// the stream fails, validating each batch whole before publishing any of it.
func (s *server) receiveBatches(ctx context.Context, stream eventbusv1.EventBusService_PublishStreamServer, queue chan<- pendingBatch) error {
	checkNamespace := grpcserver.NamespaceChecker(ctx)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		nss := make([]string, len(req.GetEvents()))
		for i, ev := range req.GetEvents() {
			ns, err := validateEvent(ev, s.maxPayload())
			if err == nil {
				err = checkNamespace(ns)
			}
			if err != nil {
				return fmt.Errorf("batch %d, event %d: %w", req.GetBatchId(), i, err)
			}
			nss[i] = ns
		}
		p := pendingBatch{id: req.GetBatchId(), nss: nss, core: req.GetCore()}
		switch {
		case p.core:
			if err := s.bus.publishCore(req.GetEvents()); err != nil {
				return err
			}
		case s.bus.coalesce.takes(req.GetEvents()):
			// Its events are stored whether or not anyone still waits.
			if p.merged, err = s.bus.coalesce.add(ctx, nss, req.GetEvents()); err != nil {
				return err
			}
		default:
			if p.batch, err = s.bus.publishBatch(ctx, nss, req.GetEvents()); err != nil {
				return err
			}
		}
		select {
		case queue <- p:
		case <-ctx.Done():
			if p.batch != nil {
				s.bus.pub.settle(p.batch, ctx.Err())
			}
			return ctx.Err()
		}
	}
}

// Subscribe implements EventBusService.
func (s *server) Subscribe(req *eventbusv1.SubscribeRequest, stream eventbusv1.EventBusService_SubscribeServer) error {
	sub, err := validateSubscribe(req)
	if err == nil && req.GetCore() {
		err = validateCoreSubscribe(req)
	}
	if err != nil {
		return toStatus(err)
	}
	ready := func(consumer string) error {
		// The header tells the client that its consumer exists, before any
		// event arrives.
		return stream.SendHeader(metadata.Pairs(ConsumerHeader, consumer))
	}
	if s.watchSlot != nil {
		release, err := s.watchSlot(stream.Context())
		if err != nil {
			return err
		}
		defer release()
	}
	s.metrics.subscriptions.Inc()
	defer s.metrics.subscriptions.Dec()
	delivered := s.metrics.delivered.WithLabelValues(sub.namespace)
	redelivered := s.metrics.redelivered.WithLabelValues(sub.namespace)
	subscribe := s.bus.subscribe
	if req.GetCore() {
		subscribe = s.bus.subscribeCore
	}
	err = subscribe(stream.Context(), sub, s.stopping, ready, func(consumer string, evs []*eventbusv1.DeliveredEvent) error {
		if err := stream.Send(&eventbusv1.SubscribeResponse{Consumer: consumer, Events: evs}); err != nil {
			return err
		}
		delivered.Add(float64(len(evs)))
		for _, ev := range evs {
			if ev.NumDelivered > 1 {
				redelivered.Inc()
			}
		}
		return nil
	})
	return toStatus(err)
}

// Ack implements EventBusService.
func (s *server) Ack(ctx context.Context, req *eventbusv1.AckRequest) (*eventbusv1.AckResponse, error) {
	if len(req.GetAckTokens()) == 0 {
		return nil, toStatus(invalidf("ack_tokens must not be empty"))
	}
	for _, t := range req.GetAckTokens() {
		if err := checkAckToken(t); err != nil {
			return nil, toStatus(err)
		}
	}
	if err := s.bus.ack(ctx, req.GetAckTokens(), req.GetNak()); err != nil {
		return nil, toStatus(err)
	}
	kind := "ack"
	if req.GetNak() {
		kind = "nak"
	}
	s.metrics.countAcks(kind, req.GetAckTokens())
	return &eventbusv1.AckResponse{}, nil
}

// DeleteConsumer implements EventBusService.
func (s *server) DeleteConsumer(ctx context.Context, req *eventbusv1.DeleteConsumerRequest) (*eventbusv1.DeleteConsumerResponse, error) {
	if err := checkName("namespace", req.GetNamespace()); err != nil {
		return nil, toStatus(err)
	}
	if err := checkName("durable_name", req.GetDurableName()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.bus.deleteConsumer(ctx, req.GetNamespace(), req.GetDurableName()); err != nil {
		return nil, toStatus(err)
	}
	return &eventbusv1.DeleteConsumerResponse{}, nil
}

// GetStreamInfo implements EventBusService.
func (s *server) GetStreamInfo(ctx context.Context, req *eventbusv1.GetStreamInfoRequest) (*eventbusv1.GetStreamInfoResponse, error) {
	if err := checkName("namespace", req.GetNamespace()); err != nil {
		return nil, toStatus(err)
	}
	resp, err := s.bus.streamInfo(ctx, req.GetNamespace())
	return resp, toStatus(err)
}

// PutObject implements EventBusService.
func (s *server) PutObject(stream eventbusv1.EventBusService_PutObjectServer) error {
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return toStatus(invalidf("PutObject stream ended before its header"))
		}
		return err
	}
	h := first.GetHeader()
	if err := validatePutHeader(h); err != nil {
		return toStatus(err)
	}
	info, err := s.objects.put(stream.Context(), h, &chunkReader{recv: stream.Recv})
	if err != nil {
		return toStatus(err)
	}
	s.metrics.objectBytes.WithLabelValues("put").Add(float64(info.GetSize()))
	return stream.SendAndClose(&eventbusv1.PutObjectResponse{Info: info})
}

// GetObject implements EventBusService.
func (s *server) GetObject(req *eventbusv1.GetObjectRequest, stream eventbusv1.EventBusService_GetObjectServer) error {
	if err := checkName("bucket", req.GetBucket()); err != nil {
		return toStatus(err)
	}
	if err := checkObjectName(req.GetName()); err != nil {
		return toStatus(err)
	}
	err := s.objects.get(stream.Context(), req.GetBucket(), req.GetName(),
		func(info *eventbusv1.ObjectInfo) error {
			return stream.Send(&eventbusv1.GetObjectResponse{Part: &eventbusv1.GetObjectResponse_Info{Info: info}})
		},
		func(chunk []byte) error {
			if err := stream.Send(&eventbusv1.GetObjectResponse{Part: &eventbusv1.GetObjectResponse_Chunk{Chunk: chunk}}); err != nil {
				return err
			}
			s.metrics.objectBytes.WithLabelValues("get").Add(float64(len(chunk)))
			return nil
		})
	return toStatus(err)
}

// ListObjects implements EventBusService.
func (s *server) ListObjects(ctx context.Context, req *eventbusv1.ListObjectsRequest) (*eventbusv1.ListObjectsResponse, error) {
	if err := checkName("bucket", req.GetBucket()); err != nil {
		return nil, toStatus(err)
	}
	objs, err := s.objects.list(ctx, req.GetBucket())
	if err != nil {
		return nil, toStatus(err)
	}
	return &eventbusv1.ListObjectsResponse{Objects: objs}, nil
}

// DeleteObject implements EventBusService.
func (s *server) DeleteObject(ctx context.Context, req *eventbusv1.DeleteObjectRequest) (*eventbusv1.DeleteObjectResponse, error) {
	if err := checkName("bucket", req.GetBucket()); err != nil {
		return nil, toStatus(err)
	}
	if err := checkObjectName(req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.objects.remove(ctx, req.GetBucket(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &eventbusv1.DeleteObjectResponse{}, nil
}

// chunkReader reads the data of a PutObject stream, one chunk message at a
// time, without a goroutine of its own.
type chunkReader struct {
	recv func() (*eventbusv1.PutObjectRequest, error)
	buf  []byte
}

// Read implements io.Reader.
func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		req, err := r.recv()
		if err != nil {
			return 0, err
		}
		if req.GetHeader() != nil {
			return 0, invalidf("PutObject: the header may only come first")
		}
		r.buf = req.GetChunk()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
