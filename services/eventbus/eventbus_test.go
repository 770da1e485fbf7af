package eventbus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
)

// guard bounds every wait of a test so that a bug fails it instead of
// hanging it; it is not a timing assertion.
const guard = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

// publishN publishes values from..to-1 as UInt64Value events on subject,
// with msg ids "<subject>-<value>", and returns their stream sequences.
func publishN(ctx context.Context, t *testing.T, c *eventbusclient.Client, subject string, from, to int) []uint64 {
	t.Helper()
	var seqs []uint64
	for i := from; i < to; i++ {
		resp, err := c.Publish(ctx, subject, wrapperspb.UInt64(uint64(i)), eventbusclient.WithMsgID(fmt.Sprintf("%s-%d", subject, i)))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		seqs = append(seqs, resp.GetSequence())
	}
	return seqs
}

// next reads n events, decoding their values; with ack it acknowledges each.
func next(ctx context.Context, t *testing.T, sub *eventbusclient.Subscription, n int, ack bool) ([]uint64, []*eventbusv1.DeliveredEvent) {
	t.Helper()
	typed := eventbusclient.NewTyped[wrapperspb.UInt64Value](sub)
	var vals []uint64
	var evs []*eventbusv1.DeliveredEvent
	for range n {
		v, ev, err := typed.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(vals), n, err)
		}
		vals = append(vals, v.GetValue())
		evs = append(evs, ev)
		if ack {
			if err := sub.Ack(ctx, ev); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
	return vals, evs
}

func seq(from, to int) []uint64 {
	var out []uint64
	for i := from; i < to; i++ {
		out = append(out, uint64(i))
	}
	return out
}

func portOf(t *testing.T, url string) int {
	t.Helper()
	var port int
	if _, err := fmt.Sscanf(url[strings.LastIndex(url, ":")+1:], "%d", &port); err != nil {
		t.Fatalf("port of %s: %v", url, err)
	}
	return port
}
