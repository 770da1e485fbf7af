package eventbus

import (
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
)

// encodeEnvelope is an envelope's payload as the coalescer writes it.
func encodeEnvelope(t testing.TB, evs ...*eventbusv1.Event) []byte {
	var out []byte
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out = protowire.AppendBytes(protowire.AppendTag(out, 1, protowire.BytesType), b)
	}
	return out
}

// TestOpenEnvelope decodes envelopes and refuses the malformed ones.
func TestOpenEnvelope(t *testing.T) {
	a := &eventbusv1.Event{Subject: "ns.c.kv_cache_update", Payload: []byte("a"), MsgId: "1", Headers: map[string]string{"K": "v"}}
	b := &eventbusv1.Event{Subject: "ns.c.kv_cache_update", Payload: []byte("b")}
	two := encodeEnvelope(t, a, b)
	for _, tc := range []struct {
		name  string
		count string
		data  []byte
		want  int // events; -1: refused
	}{
		{"two", "2", two, 2},
		{"one", "1", encodeEnvelope(t, a), 1},
		{"count too high", "3", two, -1},
		{"count too low", "1", two, -1},
		{"count not a number", "x", two, -1},
		{"count zero", "0", nil, -1},
		{"truncated", "2", two[:len(two)-1], -1},
		{"other field", "1", protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("x")), -1},
		{"not an event", "1", protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff}), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := openEnvelope(tc.count, tc.data)
			if tc.want < 0 {
				if err == nil {
					t.Fatalf("decoded %d events, want an error", len(evs))
				}
				return
			}
			if err != nil || len(evs) != tc.want {
				t.Fatalf("%d events, %v; want %d", len(evs), err, tc.want)
			}
			for i, ev := range evs {
				if want := []*eventbusv1.Event{a, b}[i]; !proto.Equal(ev, want) {
					t.Errorf("event %d: %v, want %v", i, ev, want)
				}
			}
		})
	}
}

// FuzzOpenEnvelope: any payload and count either decode to exactly count
// events or fail, without panicking.
func FuzzOpenEnvelope(f *testing.F) {
	ev := &eventbusv1.Event{Subject: "ns.c.load_metrics", Payload: []byte("p"), MsgId: "m"}
	f.Add("2", encodeEnvelope(f, ev, ev))
	f.Add("1", []byte{0x0a, 0x00})
	f.Add("3", []byte{0x0a, 0x05, 0x0a})
	f.Fuzz(func(t *testing.T, count string, data []byte) {
		evs, err := openEnvelope(count, data)
		if err != nil {
			return
		}
		if n, _ := strconv.Atoi(count); len(evs) != n {
			t.Fatalf("%d events for count %q", len(evs), count)
		}
	})
}

// TestStoredMsgIDs reads the msg ids of a plain stored message and of an
// envelope, and refuses a malformed envelope.
func TestStoredMsgIDs(t *testing.T) {
	a := &eventbusv1.Event{Subject: "ns.c.kv_cache_update", Payload: []byte("a"), MsgId: "a1"}
	b := &eventbusv1.Event{Subject: "ns.c.kv_cache_update", Payload: []byte("b"), MsgId: "b1"}
	two := encodeEnvelope(t, a, b)
	for _, tc := range []struct {
		name   string
		header nats.Header
		data   []byte
		want   []string // nil: refused
	}{
		{"plain", nats.Header{jetstream.MsgIDHeader: {"p1"}}, []byte("x"), []string{"p1"}},
		{"plain without an id", nats.Header{}, []byte("x"), []string{""}},
		{"envelope", nats.Header{EnvelopeHeader: {"2"}, jetstream.MsgIDHeader: {"env"}}, two, []string{"a1", "b1"}},
		{"envelope with a wrong count", nats.Header{EnvelopeHeader: {"3"}}, two, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := StoredMsgIDs(tc.header, tc.data)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("got %q, want an error", ids)
				}
				return
			}
			if err != nil || !slices.Equal(ids, tc.want) {
				t.Fatalf("got %q, %v; want %q", ids, err, tc.want)
			}
		})
	}
}
