package worker

import (
	"errors"
	"log/slog"
	"testing"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvevents"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestKVPublisherHoldsUpToItsLimit: before the worker is there the
// publisher holds batches and the worker admits requests, until it holds
// its limit; then a batch is not kept (ErrKVPublisherFull) and requests are
// refused with the draining code, which a frontend retries elsewhere. Once
// attached it publishes what it held, in order, then passes everything
// through, and admits requests again.
func TestKVPublisherHoldsUpToItsLimit(t *testing.T) {
	p := NewKVPublisher(3, nil)
	for i := range 3 {
		if err := p.admit(); err != nil {
			t.Fatalf("admit with %d batches held = %v; want nil", i, err)
		}
		if err := p.Publish(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{stored(uint64(10 + i))}}); err != nil {
			t.Fatalf("Publish of batch %d = %v", i+1, err)
		}
	}
	if err := p.Publish(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{stored(99)}}); !errors.Is(err, ErrKVPublisherFull) {
		t.Fatalf("Publish past the limit = %v; want ErrKVPublisherFull", err)
	}
	err := p.admit()
	var he *transport.HandlerError
	if !errors.Is(err, transport.ErrDraining) || !errors.As(err, &he) || he.Code != transport.CodeDraining {
		t.Fatalf("admit with 3 of 3 batches held = %v; want a draining refusal", err)
	}
	if p.Waiting() != 3 {
		t.Fatalf("Waiting = %d; want 3", p.Waiting())
	}

	w := &Worker{cfg: Config{KVEventsMode: kvevents.None}, log: slog.New(slog.DiscardHandler), kvIndex: NewKVIndex(0)}
	if err := p.claim(); err != nil {
		t.Fatal(err)
	}
	p.attach(w)
	if err := p.claim(); err == nil {
		t.Fatal("a second worker could claim an attached publisher")
	}
	if err := p.admit(); err != nil || p.Waiting() != 0 {
		t.Fatalf("attached: admit = %v, Waiting = %d; want nil, 0", err, p.Waiting())
	}
	if err := p.Publish(&workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{stored(13)}}); err != nil {
		t.Fatal(err)
	}
	b, last, err := w.kvIndex.Events(0, 1, 100)
	if err != nil || last != 4 || len(b.Events) != 4 {
		t.Fatalf("local ring = %v, last %d, %v; want events 1-4", b, last, err)
	}
	for i, ev := range b.Events {
		if h := ev.GetStored().GetBlocks()[0].GetSequenceHash(); h != uint64(10+i) {
			t.Fatalf("event %d stores %d; want %d (held batches first, in order, the dropped one absent)", i+1, h, 10+i)
		}
	}

	// The default limit is DefaultKVPublishBuffer.
	d := NewKVPublisher(0, nil)
	one := &workerv1.KvEventBatch{Events: []*workerv1.KvCacheEvent{stored(1)}}
	for range DefaultKVPublishBuffer - 1 {
		_ = d.Publish(one)
	}
	if err := d.admit(); err != nil {
		t.Fatalf("the default publisher refused a request with %d batches held: %v", DefaultKVPublishBuffer-1, err)
	}
	_ = d.Publish(one)
	if d.admit() == nil || !errors.Is(d.Publish(one), ErrKVPublisherFull) {
		t.Fatalf("the default publisher admitted a request or kept a batch with %d batches held", DefaultKVPublishBuffer)
	}
}
