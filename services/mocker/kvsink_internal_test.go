package mocker

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/services/mocker/engine"
)

// TestKVSinkRefusesRequestsOnceFull: before the worker is registered the
// sink holds each step's events and admits requests, until it holds its
// limit; from then on requests are refused with the draining code, which a
// frontend retries on another instance, and the events of requests already
// running are still held.
func TestKVSinkRefusesRequestsOnceFull(t *testing.T) {
	s := &kvSink{log: slog.New(slog.DiscardHandler), max: 3}
	for i := range 3 {
		if err := s.admit(); err != nil {
			t.Fatalf("admit with %d batches held = %v; want nil", i, err)
		}
		s.publish([]engine.Event{{ID: uint64(i + 1)}})
	}
	err := s.admit()
	var he *transport.HandlerError
	if !errors.Is(err, transport.ErrDraining) || !errors.As(err, &he) || he.Code != transport.CodeDraining {
		t.Fatalf("admit with 3 of 3 batches held = %v; want a draining refusal", err)
	}
	s.publish([]engine.Event{{ID: 4}})
	if len(s.held) != 4 {
		t.Fatalf("%d batches held; want 4 (a running request's events are kept)", len(s.held))
	}
	// The default limit is maxHeldKVBatches.
	d := &kvSink{log: s.log}
	for range maxHeldKVBatches - 1 {
		d.publish(nil)
	}
	if err := d.admit(); err != nil {
		t.Fatalf("the default sink refused a request with %d batches held: %v", maxHeldKVBatches-1, err)
	}
	d.publish(nil)
	if d.admit() == nil {
		t.Fatalf("the default sink admitted a request with %d batches held", maxHeldKVBatches)
	}
}
