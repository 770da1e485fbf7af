package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

func eventsFlags(fs *flag.FlagSet) func(context.Context, Config, io.Writer) error {
	ns := fs.String("namespace", "dynamo", "namespace whose events to show")
	subject := fs.String("subject", "", "subject filter inside the namespace, wildcards allowed, e.g. '*.kv_cache_update' (empty: every event)")
	fromStart := fs.Bool("from-start", false, "replay the events still stored before following new ones")
	count := fs.Int("count", 0, "stop after this many events (0: until interrupted)")
	return func(ctx context.Context, c Config, out io.Writer) error {
		if *ns == "" || *count < 0 {
			return errors.New("--namespace must not be empty and --count not negative")
		}
		return events(ctx, c, out, *ns, *subject, *fromStart, *count)
	}
}

// events follows a namespace's stream on an ephemeral consumer and prints
// each event decoded: KV event batches and load reports of workers, router
// replica events, and the size of anything else.
func events(ctx context.Context, c Config, out io.Writer, ns, subject string, fromStart bool, count int) error {
	bus, err := c.eventbus()
	if err != nil {
		return err
	}
	defer bus.Close()
	if subject != "" && !strings.HasPrefix(subject, ns+".") {
		subject = ns + "." + subject // relative to the namespace
	}
	policy := eventbusv1.DeliverPolicy_DELIVER_POLICY_NEW
	if fromStart {
		policy = eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL
	}
	stream, err := bus.Raw().Subscribe(ctx, &eventbusv1.SubscribeRequest{Namespace: ns, FilterSubject: subject, DeliverPolicy: policy, AutoAck: true})
	if err != nil {
		return err
	}
	n := 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.Canceled || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("subscribe to %s: %w", ns, err)
		}
		for _, ev := range resp.Events {
			if err := printEvent(out, ev, c.Output == "json"); err != nil {
				return err
			}
			if n++; count > 0 && n >= count {
				return nil
			}
		}
	}
}

// decode returns the message an event carries, or nil: the type its
// Switchyard-Type header names, or for events without one the type its
// subject's event name implies.
func decode(ev *eventbusv1.DeliveredEvent) proto.Message {
	var m proto.Message
	if name, ok := ev.Headers[wire.HeaderType]; ok {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			return nil
		}
		m = mt.New().Interface()
		if proto.Unmarshal(ev.Payload, m) != nil {
			return nil
		}
		return m
	}
	switch name := wire.EventName(ev.Subject); name {
	case wire.KVEventsName:
		m = &workerv1.KvEventBatch{}
	case wire.LoadName:
		m = &workerv1.LoadMetrics{}
	case wire.ReplicaSyncName:
		m = &routerv1.ReplicaEvent{}
	}
	if m == nil || proto.Unmarshal(ev.Payload, m) != nil {
		return nil
	}
	return m
}

func printEvent(out io.Writer, ev *eventbusv1.DeliveredEvent, asJSON bool) error {
	m := decode(ev)
	if asJSON {
		line := map[string]any{"subject": ev.Subject, "sequence": ev.StreamSequence, "time": ev.Time.AsTime().UTC().Format(time.RFC3339Nano)}
		if m != nil {
			b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
			if err != nil {
				return err
			}
			line["message"] = json.RawMessage(b)
		} else {
			line["payload_bytes"] = len(ev.Payload)
		}
		return json.NewEncoder(out).Encode(line)
	}
	_, err := fmt.Fprintf(out, "%s  #%d  %s  %s\n", ev.Time.AsTime().Local().Format("15:04:05.000"), ev.StreamSequence, ev.Subject, describe(m, len(ev.Payload)))
	return err
}

// describe says what a decoded message holds, in one line.
func describe(m proto.Message, size int) string {
	switch m := m.(type) {
	case *workerv1.KvEventBatch:
		parts := make([]string, 0, len(m.Events))
		for _, e := range m.Events {
			switch k := e.Event.(type) {
			case *workerv1.KvCacheEvent_Stored:
				parts = append(parts, fmt.Sprintf("stored %d blocks (parent %x)", len(k.Stored.Blocks), k.Stored.GetParentSequenceHash()))
			case *workerv1.KvCacheEvent_Removed:
				parts = append(parts, fmt.Sprintf("removed %d blocks", len(k.Removed.SequenceHashes)))
			case *workerv1.KvCacheEvent_Cleared:
				parts = append(parts, "cleared")
			}
		}
		return fmt.Sprintf("kv instance=%x rank=%d events %d..%d: %s", m.InstanceId, m.DpRank, m.FirstEventId,
			m.FirstEventId+uint64(max(len(m.Events), 1))-1, strings.Join(parts, ", "))
	case *workerv1.LoadMetrics:
		return fmt.Sprintf("load instance=%x running=%d waiting=%d kv=%d/%d blocks decode=%d blocks prefill=%d tokens", m.InstanceId,
			m.RunningRequests, m.WaitingRequests, m.KvBlocksUsed, m.KvBlocksTotal, m.ActiveDecodeBlocks, m.ActivePrefillTokens)
	case *routerv1.ReplicaEvent:
		return "router replica " + m.ReplicaId + ": " + protojson.Format(m)
	}
	return fmt.Sprintf("%d bytes", size)
}
