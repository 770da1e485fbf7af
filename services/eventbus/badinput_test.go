package eventbus_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	raw := c.Raw()
	if _, err := c.Publish(ctx, "ns.comp.ev", wrapperspb.UInt64(1)); err != nil {
		t.Fatal(err)
	}
	subscribe := func(req *eventbusv1.SubscribeRequest) error {
		stream, err := raw.Subscribe(ctx, req)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	publish := func(subject string, payload []byte) error {
		_, err := raw.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: subject, Payload: payload}})
		return err
	}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"wildcard subject", func() error { return publish("ns.comp.*", nil) }, codes.InvalidArgument, "wildcard"},
		{"full wildcard subject", func() error { return publish("ns.>", nil) }, codes.InvalidArgument, "wildcard"},
		{"empty token", func() error { return publish("ns..ev", nil) }, codes.InvalidArgument, "empty token"},
		{"trailing dot", func() error { return publish("ns.comp.", nil) }, codes.InvalidArgument, "empty token"},
		{"too few tokens", func() error { return publish("ns.comp", nil) }, codes.InvalidArgument, "{namespace}.{component}.{event_name}"},
		{"whitespace", func() error { return publish("ns.comp.e v", nil) }, codes.InvalidArgument, "whitespace"},
		{"payload over max_payload", func() error { return publish("ns.comp.ev", make([]byte, 1<<20+1)) }, codes.InvalidArgument, "max_payload of 1048576 bytes"},
		{"payload and headers over max_payload", func() error {
			_, err := raw.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "ns.comp.ev", Payload: make([]byte, 1<<20), MsgId: "id"}})
			return err
		}, codes.InvalidArgument, "max_payload of 1048576 bytes"},
		{"reserved header", func() error {
			_, err := raw.Publish(ctx, &eventbusv1.PublishRequest{Event: &eventbusv1.Event{Subject: "ns.comp.ev", Headers: map[string]string{"Nats-Expected-Stream": "x"}}})
			return err
		}, codes.InvalidArgument, "reserved"},
		{"bad event in a batch", func() error {
			stream, err := raw.PublishStream(ctx)
			if err != nil {
				return err
			}
			if err := stream.Send(&eventbusv1.PublishStreamRequest{BatchId: 7, Events: []*eventbusv1.Event{{Subject: "ns.comp.ev"}, {Subject: "ns.*.ev"}}}); err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, codes.InvalidArgument, "batch 7, event 1"},
		{"unknown durable", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DurableName: "ghost", Bind: true})
		}, codes.NotFound, `durable "ghost" does not exist`},
		{"sequence policy without sequence", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE})
		}, codes.InvalidArgument, "needs start_sequence"},
		{"time policy without time", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_TIME})
		}, codes.InvalidArgument, "needs start_time"},
		{"all with a sequence", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL, StartSequence: 3})
		}, codes.InvalidArgument, "takes neither"},
		{"unknown policy", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: 42})
		}, codes.InvalidArgument, "deliver policy 42 is unknown"},
		{"invalid start time", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", DeliverPolicy: eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_TIME, StartTime: &timestamppb.Timestamp{Nanos: -1}})
		}, codes.InvalidArgument, "start_time"},
		{"filter outside the namespace", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "ns", FilterSubject: "other.>"})
		}, codes.InvalidArgument, "outside namespace"},
		{"namespace with a dot", func() error {
			return subscribe(&eventbusv1.SubscribeRequest{Namespace: "a.b"})
		}, codes.InvalidArgument, "namespace"},
		{"delete unknown durable", func() error {
			_, err := raw.DeleteConsumer(ctx, &eventbusv1.DeleteConsumerRequest{Namespace: "ns", DurableName: "ghost"})
			return err
		}, codes.NotFound, `durable "ghost" does not exist`},
		{"forged ack token", func() error {
			_, err := raw.Ack(ctx, &eventbusv1.AckRequest{AckTokens: []string{"ns.comp.ev"}})
			return err
		}, codes.InvalidArgument, "ack token"},
		{"unknown namespace info", func() error {
			_, err := raw.GetStreamInfo(ctx, &eventbusv1.GetStreamInfoRequest{Namespace: "nowhere"})
			return err
		}, codes.NotFound, "no stream"},
		{"unknown bucket", func() error {
			_, err := raw.ListObjects(ctx, &eventbusv1.ListObjectsRequest{Bucket: "nowhere"})
			return err
		}, codes.NotFound, `bucket "nowhere"`},
		{"object put without header", func() error {
			stream, err := raw.PutObject(ctx)
			if err != nil {
				return err
			}
			if err := stream.Send(&eventbusv1.PutObjectRequest{Part: &eventbusv1.PutObjectRequest_Chunk{Chunk: []byte("x")}}); err != nil {
				return err
			}
			_, err = stream.CloseAndRecv()
			return err
		}, codes.InvalidArgument, "header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st, _ := status.FromError(err)
			if st.Code() != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v; want %s containing %q", err, tc.code, tc.msg)
			}
		})
	}
}
