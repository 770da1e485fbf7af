package eventbus

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
)

// connectEmbedded starts a nats-server with JetStream and connects to it;
// the test's cleanup stops both.
func connectEmbedded(t *testing.T) *nats.Conn {
	t.Helper()
	ns, err := StartEmbeddedNATS(t.TempDir(), -1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// embeddedJetStream is connectEmbedded with a JetStream client on the
// connection, for the tests that make their streams themselves.
func embeddedJetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := connectEmbedded(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func testPublisher(t *testing.T, nc *nats.Conn, maxPending int64, timeout time.Duration) *publisher {
	t.Helper()
	p, err := newPublisher(nc, maxPending, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.sub.Unsubscribe() })
	return p
}

func events(subject string, ids ...string) []*eventbusv1.Event {
	evs := make([]*eventbusv1.Event, len(ids))
	for i, id := range ids {
		evs[i] = &eventbusv1.Event{Subject: subject, Payload: []byte("event " + strconv.Itoa(i)), MsgId: id, Headers: map[string]string{"trace": id}}
	}
	return evs
}

func namespaces(evs []*eventbusv1.Event) []string {
	nss := make([]string, len(evs))
	for i, ev := range evs {
		nss[i] = namespaceOf(ev.GetSubject())
	}
	return nss
}

func publishTo(ctx context.Context, p *publisher, evs []*eventbusv1.Event) (*pubBatch, error) {
	return p.publish(ctx, namespaces(evs), evs, ordered)
}

// ordered is every namespace but "unordered".
func ordered(ns string) bool { return ns != "unordered" }

func TestPublisherMatchesAcknowledgements(t *testing.T) {
	t.Parallel()
	nc, js := embeddedJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, st := range []jetstream.StreamConfig{
		{Name: StreamName("ns"), Subjects: []string{"ns.>"}},
		{Name: StreamName("small"), Subjects: []string{"small.>"}, MaxMsgSize: 64},
		{Name: StreamName("mix"), Subjects: []string{"mix.>"}},
		{Name: StreamName("unordered"), Subjects: []string{"unordered.>"}},
	} {
		if _, err := js.CreateStream(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	p := testPublisher(t, nc, 64, 10*time.Second)

	tests := []struct {
		name     string
		events   []*eventbusv1.Event
		seqs     []uint64
		dups     []bool
		eventErr error // every event's
		batchErr error
	}{
		{name: "empty batch"},
		{name: "in order", events: events("ns.a.b", "1", "2", "3", ""), seqs: []uint64{1, 2, 3, 4}, dups: []bool{false, false, false, false}},
		{name: "repeated msg ids", events: events("ns.a.b", "2", "5", "5"), seqs: []uint64{2, 5, 5}, dups: []bool{true, false, true}},
		{
			name:   "namespaces interleaved",
			events: append(append(events("mix.a.b", "m1", "m2"), events("ns.a.b", "6")...), events("mix.a.b", "m3")...),
			seqs:   []uint64{1, 2, 6, 3},
			dups:   []bool{false, false, false, false},
		},
		{
			name:   "a reply subject per event",
			events: append(events("unordered.a.b", "u1", "u2"), append(events("mix.a.b", "m4"), events("unordered.a.b", "u1")...)...),
			seqs:   []uint64{1, 2, 4, 1},
			dups:   []bool{false, false, false, true},
		},
		{name: "no stream", events: events("other.a.b", "x"), eventErr: jetstream.ErrNoStreamResponse},
		{name: "refused by the stream", events: []*eventbusv1.Event{{Subject: "small.a.b", Payload: make([]byte, 100)}}, eventErr: jetstream.ErrStreamMessageExceedsMaximum},
		{name: "over max_payload", events: []*eventbusv1.Event{{Subject: "ns.a.b", Payload: make([]byte, nc.MaxPayload()+1)}}, batchErr: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := p.publish(ctx, namespaces(tc.events), tc.events, ordered)
			if err != nil {
				t.Fatal(err)
			}
			acks, err := p.await(ctx, b)
			if tc.batchErr != nil {
				if !errors.Is(err, tc.batchErr) {
					t.Fatalf("await: %v; want %v", err, tc.batchErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("await: %v", err)
			}
			if len(acks) != len(tc.events) {
				t.Fatalf("%d acks for %d events", len(acks), len(tc.events))
			}
			for i, a := range acks {
				if tc.eventErr != nil {
					if !errors.Is(a.err, tc.eventErr) {
						t.Errorf("event %d: %v; want %v", i, a.err, tc.eventErr)
					}
					continue
				}
				if a.err != nil || a.seq != tc.seqs[i] || a.dup != tc.dups[i] {
					t.Errorf("event %d: seq %d dup %v err %v; want seq %d dup %v", i, a.seq, a.dup, a.err, tc.seqs[i], tc.dups[i])
				}
			}
		})
	}

	// The events were stored with their headers.
	st, err := js.Stream(ctx, StreamName("ns"))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(jetstream.MsgIDHeader) != "1" || msg.Header.Get("trace") != "1" || string(msg.Data) != "event 0" {
		t.Errorf("stored message: headers %v, data %q", msg.Header, msg.Data)
	}
}

// TestPublisherLimits covers what happens when acknowledgements do not come:
// a subject with a plain subscriber is delivered but never answered.
func TestPublisherLimits(t *testing.T) {
	t.Parallel()
	nc := connectEmbedded(t)
	quiet, err := nc.SubscribeSync("quiet.>")
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 50*time.Millisecond) }

	t.Run("deadline", func(t *testing.T) {
		p := testPublisher(t, nc, 4, 50*time.Millisecond)
		b, err := publishTo(ctx, p, events("quiet.a.b", "1", "2"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.await(ctx, b); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "did not acknowledge") {
			t.Fatalf("await: %v; want unavailable, not acknowledged", err)
		}
		// The room is back: a batch of the whole limit goes out at once.
		sctx, cancel := short()
		defer cancel()
		if _, err := publishTo(sctx, p, events("quiet.a.b", "1", "2", "3", "4")); err != nil {
			t.Fatalf("publish after the deadline: %v", err)
		}
	})

	t.Run("room", func(t *testing.T) {
		p := testPublisher(t, nc, 2, time.Minute)
		first, err := publishTo(ctx, p, events("quiet.a.b", "1", "2"))
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := short()
		defer cancel()
		if _, err := publishTo(sctx, p, events("quiet.a.b", "3")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish past the limit: %v; want it to wait until its context ends", err)
		}
		p.failAll(errors.New("reconnected"))
		if _, err := p.await(ctx, first); err == nil || err.Error() != "reconnected" {
			t.Fatalf("await after failAll: %v", err)
		}
		// A batch larger than the limit goes out once nothing is pending.
		big, err := publishTo(ctx, p, events("quiet.a.b", "4", "5", "6"))
		if err != nil {
			t.Fatalf("publish after failAll: %v", err)
		}
		wctx, cancel := short()
		defer cancel()
		if _, err := p.await(wctx, big); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("await with an ending context: %v", err)
		}
		if _, err := p.publish(wctx, nil, nil, ordered); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish with an ended context: %v", err)
		}
		// Giving up on a batch released its room.
		if b, err := publishTo(ctx, p, events("quiet.a.b", "7", "8")); err != nil {
			t.Fatalf("publish after giving up: %v", err)
		} else {
			p.settle(b, nil)
		}
	})

	// The events did reach the subscriber that never answers.
	if n, _, _ := quiet.Pending(); n == 0 {
		t.Error("the quiet subscriber received nothing")
	}
}

func TestScanPubAck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in  string
		seq uint64
		dup bool
		ok  bool
	}{
		{`{"stream":"EVENTS_ns","seq":12}`, 12, false, true},
		{`{"stream":"EVENTS_ns","seq":12,"duplicate":true}`, 12, true, true},
		{`{"stream":"EVENTS_ns","domain":"hub","seq":0,"duplicate":false}`, 0, false, true},
		{`{"stream":"EVENTS_ns","seq":18446744073709551615,"later":null,"n":3,"f":false}`, 18446744073709551615, false, true},
		{`{"stream":"EVENTS_ns","seq":18446744073709551616}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":012}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":-1}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":1.5}`, 0, false, false},
		{`{"stream":"","seq":1}`, 0, false, false},
		{`{"seq":1}`, 0, false, false},
		{`{"stream":"EVENTS_ns"}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":1,"seq":2}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":1,"SEQ":2}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":1,"duplicate":"yes"}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":1,"x":{"a":1}}`, 0, false, false},
		{`{"stream":"EVENTS_\"ns","seq":1}`, 0, false, false},
		{`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"EVENTS_ns","seq":0}`, 0, false, false},
		{`{"stream": "EVENTS_ns", "seq": 1}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":1,}`, 0, false, false},
		{`{"stream":"EVENTS_ns","seq":1`, 0, false, false},
		{``, 0, false, false},
		{`{}`, 0, false, false},
	}
	for _, tc := range tests {
		seq, dup, ok := scanPubAck([]byte(tc.in))
		if seq != tc.seq || dup != tc.dup || ok != tc.ok {
			t.Errorf("scanPubAck(%s) = %d, %v, %v; want %d, %v, %v", tc.in, seq, dup, ok, tc.seq, tc.dup, tc.ok)
		}
	}
}

// FuzzScanPubAck checks the hand-written scanner against encoding/json:
// whatever it accepts, encoding/json reads the same way.
func FuzzScanPubAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"EVENTS_ns","seq":12,"duplicate":true}`,
		`{"stream":"EVENTS_ns","domain":"hub","seq":3}`,
		`{"error":{"code":400,"err_code":10054,"description":"bad"},"stream":"s","seq":0}`,
		`{"stream":"s","seq":1,"Duplicate":true}`,
		`{"stream":"s","seq":99999999999999999999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seq, dup, ok := scanPubAck(data)
		if !ok {
			return
		}
		var r struct {
			Stream    string              `json:"stream"`
			Seq       uint64              `json:"seq"`
			Duplicate bool                `json:"duplicate"`
			Error     *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("scanPubAck accepted %q, which encoding/json refuses: %v", data, err)
		}
		if r.Stream == "" || r.Error != nil || r.Seq != seq || r.Duplicate != dup {
			t.Fatalf("scanPubAck(%q) = %d, %v; encoding/json reads %+v", data, seq, dup, r)
		}
	})
}

func TestDecodeAck(t *testing.T) {
	t.Parallel()
	status := func(code string) *nats.Msg { return &nats.Msg{Header: nats.Header{"Status": []string{code}}} }
	tests := []struct {
		name string
		msg  *nats.Msg
		seq  uint64
		dup  bool
		err  error
	}{
		{"acknowledgement", &nats.Msg{Data: []byte(`{"stream":"EVENTS_ns","seq":7}`)}, 7, false, nil},
		{"with spaces", &nats.Msg{Data: []byte(`{ "stream": "EVENTS_ns", "seq": 7, "duplicate": true }`)}, 7, true, nil},
		{"no responders", status("503"), 0, false, jetstream.ErrNoStreamResponse},
		{"refusal", &nats.Msg{Data: []byte(`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"},"stream":"EVENTS_ns","seq":0}`)}, 0, false, jetstream.ErrStreamMessageExceedsMaximum},
		{"not json", &nats.Msg{Data: []byte("+OK")}, 0, false, jetstream.ErrInvalidJSAck},
		{"no stream", &nats.Msg{Data: []byte(`{"seq":7}`)}, 0, false, jetstream.ErrInvalidJSAck},
		{"other status", status("408"), 0, false, jetstream.ErrInvalidJSAck},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq, dup, err := decodeAck(tc.msg)
			if seq != tc.seq || dup != tc.dup || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("decodeAck = %d, %v, %v; want %d, %v, %v", seq, dup, err, tc.seq, tc.dup, tc.err)
			}
		})
	}
}

// TestPublisherResendsUnansweredEvents publishes events of a replicated
// stream's kind (each with its own reply subject) while no stream captures
// their subject, as on a cluster whose stream leader just died: NATS answers
// "no responders". The publisher publishes them again every resendAfter, so
// they are stored as soon as a stream is there (a new leader), once each,
// well before the batch's acknowledgement timeout. Events without a msg id
// are not resent: that batch fails at its timeout.
func TestPublisherResendsUnansweredEvents(t *testing.T) {
	t.Parallel()
	nc, js := embeddedJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testPublisher(t, nc, 1024, 30*time.Second)
	p.resend = 50 * time.Millisecond
	withIDs := events("unordered.a.b", "r1", "r2", "r3")
	b, err := publishTo(ctx, p, withIDs)
	if err != nil {
		t.Fatal(err)
	}
	noIDs := events("unordered.a.b", "", "")
	nb, err := publishTo(ctx, p, noIDs)
	if err != nil {
		t.Fatal(err)
	}
	// Let a few resends be answered "no responders", then the stream comes.
	time.Sleep(3 * p.resend)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "UNORDERED", Subjects: []string{"unordered.>"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	acks, err := p.await(ctx, b)
	if err != nil {
		t.Fatalf("batch with msg ids: %v", err)
	}
	t.Logf("stored %s after the stream appeared", time.Since(start).Round(time.Millisecond))
	for i, a := range acks {
		if a.err != nil || a.seq == 0 {
			t.Errorf("event %d: %+v", i, a)
		}
	}
	st, err := js.Stream(ctx, "UNORDERED")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(withIDs)) {
		t.Errorf("stream holds %d events, want %d (each resent event once)", info.State.Msgs, len(withIDs))
	}
	// The batch without msg ids kept its "no responders": not resent.
	nacks, err := p.await(ctx, nb)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range nacks {
		if !errors.Is(a.err, jetstream.ErrNoStreamResponse) {
			t.Errorf("event %d without a msg id: %+v, want no responders", i, a)
		}
	}
}

// TestPublisherResendsRefusedEventsFirst publishes a batch of a replicated
// stream's kind while no stream captures its subject (answered "no
// responders", as right after a replicated stream is created, before its
// leader's interest reached this server, or while it has no leader), then,
// once the stream is there, a later batch, well within resendAfter and
// resendBefore. The refused events must be published again before the later
// batch, so that the stream holds them first; otherwise the later batch is
// stored first and they follow when resent (a consumer that applies events
// in order takes them for duplicates).
func TestPublisherResendsRefusedEventsFirst(t *testing.T) {
	t.Parallel()
	nc, js := embeddedJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testPublisher(t, nc, 1024, 30*time.Second)
	// The age rule may not put them back in order; resend ticks run only
	// in await, which starts after the later batch is published.
	p.resend, p.resendBefore = 100*time.Millisecond, time.Minute
	first, err := publishTo(ctx, p, events("unordered.a.b", "e1", "e2", "e3"))
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the first batch was answered "no responders" (handleAck
	// counts the batch once).
	for refused := false; !refused; {
		p.mu.Lock()
		refused = p.refused == 1
		p.mu.Unlock()
		if !refused {
			select {
			case <-ctx.Done():
				t.Fatal("the first batch was never answered no responders")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "UNORDERED", Subjects: []string{"unordered.>"}}); err != nil {
		t.Fatal(err)
	}
	later, err := publishTo(ctx, p, events("unordered.a.b", "e4"))
	if err != nil {
		t.Fatal(err)
	}
	lacks, err := p.await(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	facks, err := p.await(ctx, first)
	if err != nil {
		t.Fatalf("the refused batch was not stored once the stream was there: %v", err)
	}
	var seqs []uint64
	for _, a := range append(facks, lacks...) {
		if a.err != nil {
			t.Fatalf("acks %+v %+v", facks, lacks)
		}
		seqs = append(seqs, a.seq)
	}
	if !slices.IsSorted(seqs) {
		t.Fatalf("stream sequences of e1..e4 %v: the later batch was stored before the refused one", seqs)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refused != 0 {
		t.Errorf("%d refused batches still counted after every batch ended", p.refused)
	}
}
