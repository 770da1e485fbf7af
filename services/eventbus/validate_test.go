package eventbus

import (
	"errors"
	"strings"
	"testing"
	"unicode"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
)

func TestCheckSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject   string
		wildcards bool
		ok        bool
	}{
		{"vllm-agg.backend.kv_cache_update", false, true},
		{"ns.comp.ev.extra", false, true},
		{"ns.comp", false, false},
		{"ns.comp.*", false, false},
		{"ns.comp.>", false, false},
		{"ns.comp.a*b", false, false},
		{"ns..ev", false, false},
		{".ns.comp.ev", false, false},
		{"ns.comp.ev.", false, false},
		{"ns.comp.e\tv", false, false},
		{"ns.*.ev", true, true},
		{"ns.>", true, true},
		{"ns.>.ev", true, false},
		{"ns.a*.ev", true, false},
		{"", false, false},
		{strings.Repeat("a.", 300) + "a", false, false},
	}
	for _, tc := range tests {
		minTokens := 3
		if tc.wildcards {
			minTokens = 2
		}
		err := checkSubject(tc.subject, minTokens, tc.wildcards)
		if (err == nil) != tc.ok {
			t.Errorf("checkSubject(%q, wildcards=%v) = %v; want ok=%v", tc.subject, tc.wildcards, err, tc.ok)
		}
	}
}

func FuzzCheckSubject(f *testing.F) {
	for _, s := range []string{"vllm-agg.backend.kv_cache_update", "ns.*.ev", "ns.>", "ns..ev", "a.b.c d", "ns.comp.é", "\x00.a.b"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, subject string, wildcards bool) {
		if checkSubject(subject, 3, wildcards) != nil {
			return
		}
		tokens := strings.Split(subject, ".")
		if len(tokens) < 3 {
			t.Fatalf("accepted %q with %d tokens", subject, len(tokens))
		}
		for i, tok := range tokens {
			if tok == "" || strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
				t.Fatalf("accepted %q with an empty or blank token, or a control character", subject)
			}
			if !wildcards && strings.ContainsAny(tok, "*>") {
				t.Fatalf("accepted wildcard subject %q for publish", subject)
			}
			if tok == ">" && i != len(tokens)-1 {
				t.Fatalf("accepted %q with > before the end", subject)
			}
		}
	})
}

func FuzzValidateEvent(f *testing.F) {
	f.Add("vllm-agg.backend.kv_cache_update", []byte("payload"), "id-1", "Trace-Id", "abc")
	f.Add("ns.comp.*", []byte{}, "", "", "")
	f.Add("n s.comp.ev", []byte("x"), "id\n", "Nats-Msg-Id", "x")
	f.Add("ns.comp.ev", make([]byte, 2048), "", "a:b", "c\r\nd")
	f.Fuzz(func(t *testing.T, subject string, payload []byte, msgID, hk, hv string) {
		ev := &eventbusv1.Event{Subject: subject, Payload: payload, MsgId: msgID, Headers: map[string]string{hk: hv}}
		ns, err := validateEvent(ev, 1024)
		if err != nil {
			return
		}
		if len(payload)+headerBytes(ev) > 1024 {
			t.Fatalf("accepted a %d-byte payload with %d bytes of headers, over 1024", len(payload), headerBytes(ev))
		}
		if checkName("namespace", ns) != nil || !strings.HasPrefix(subject, ns+".") {
			t.Fatalf("accepted %q with namespace %q", subject, ns)
		}
		if strings.HasPrefix(strings.ToLower(hk), "nats-") || strings.ContainsAny(hk, ": \r\n") || strings.ContainsAny(hv, "\r\n") {
			t.Fatalf("accepted header %q: %q", hk, hv)
		}
		// The NATS message's headers are no larger than validation counted.
		m := &nats.Msg{Header: nats.Header{}}
		var id [1]string
		fillMsg(m, ev, "", &id)
		if h := m.Size() - len(subject) - len(payload); h > headerBytes(ev) {
			t.Fatalf("NATS encodes %d bytes of headers; validation counted %d", h, headerBytes(ev))
		}
	})
}

func FuzzValidateSubscribe(f *testing.F) {
	f.Add("ns", "", "", false, int32(0), uint64(0), int64(0), int32(0), int64(0), int32(0))
	f.Add("ns", "ns.*.ev", "group", true, int32(3), uint64(5), int64(0), int32(0), int64(1), int32(0))
	f.Add("ns", "ns.>", "d", false, int32(4), uint64(0), int64(1700000000), int32(5), int64(0), int32(-1))
	f.Add("a.b", "other.>", "x y", false, int32(99), uint64(0), int64(-1), int32(-1), int64(-1), int32(-3))
	f.Fuzz(func(t *testing.T, ns, filter, durable string, bind bool, policy int32, startSeq uint64, sec int64, nanos int32, waitSec int64, maxPending int32) {
		req := &eventbusv1.SubscribeRequest{
			Namespace: ns, FilterSubject: filter, DurableName: durable, Bind: bind,
			DeliverPolicy: eventbusv1.DeliverPolicy(policy), StartSequence: startSeq, MaxAckPending: maxPending,
		}
		if sec != 0 || nanos != 0 {
			req.StartTime = &timestamppb.Timestamp{Seconds: sec, Nanos: nanos}
		}
		if waitSec != 0 {
			req.AckWait = &durationpb.Duration{Seconds: waitSec}
		}
		s, err := validateSubscribe(req)
		if err != nil {
			return
		}
		if !strings.HasPrefix(s.filter, ns+".") || s.ackWait <= 0 || s.maxAckPending <= 0 {
			t.Fatalf("accepted %v as %+v", req, s)
		}
		if s.bind && s.durable == "" {
			t.Fatalf("accepted bind without a durable: %v", req)
		}
		cfg := consumerConfig(s, 1)
		// The whole namespace goes without a filter; anything narrower keeps it.
		wantFilter := s.filter
		if s.filter == ns+".>" {
			wantFilter = ""
		}
		if cfg.FilterSubject != wantFilter || cfg.Durable != durable {
			t.Fatalf("consumer config %+v for %v", cfg, req)
		}
	})
}

func FuzzCheckAckToken(f *testing.F) {
	f.Add("$JS.ACK.EVENTS_ns.worker.1.5.5.1700000000000000000.0")
	f.Add("$JS.ACK.hub.ACCHASH.EVENTS_ns.worker.1.5.5.1700000000000000000.0.rand")
	f.Add("$JS.ACK.>")
	f.Add("ns.comp.ev")
	f.Add("$JS.ACK.a.b.c.d.e.f.*")
	f.Fuzz(func(t *testing.T, token string) {
		if checkAckToken(token) != nil {
			return
		}
		if !strings.HasPrefix(token, "$JS.ACK.") || strings.ContainsAny(token, "*> \t\r\n") || strings.Contains(token, "..") {
			t.Fatalf("accepted ack token %q", token)
		}
	})
}

func FuzzCheckObjectName(f *testing.F) {
	for _, s := range []string{"model/weights.bin", "", "a\x00b", "snapshot 1.tar", strings.Repeat("x", 2000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if checkObjectName(name) != nil {
			return
		}
		if name == "" || len(name) > 1024 || strings.IndexFunc(name, unicode.IsControl) >= 0 {
			t.Fatalf("accepted object name %q", name)
		}
	})
}

// TestValidatorLimits: each size limit of the publish validators takes a
// value of exactly the limit and refuses one byte more, with ErrInvalid:
// the subject (maxSubjectLen), a name (maxNameLen), the msg id (maxNameLen),
// the headers (maxHeaderBytes, names and values together) and the payload
// (the server's max_payload).
func TestValidatorLimits(t *testing.T) {
	t.Parallel()
	// The server's max_payload, above the headers' own limit, so that the
	// headers meet theirs first.
	const maxPayload = 64 << 10
	// A subject of n bytes: "ns.c." and then a last token.
	subject := func(n int) string { return "ns.c." + strings.Repeat("e", n-len("ns.c.")) }
	event := func(edit func(*eventbusv1.Event)) error {
		ev := &eventbusv1.Event{Subject: "ns.c.e"}
		edit(ev)
		_, err := validateEvent(ev, maxPayload)
		return err
	}
	tests := []struct {
		name  string
		check func(n int) error
		limit int
	}{
		{"subject", func(n int) error { return checkSubject(subject(n), 3, false) }, maxSubjectLen},
		{"name", func(n int) error { return checkName("namespace", strings.Repeat("n", n)) }, maxNameLen},
		{"msg id", func(n int) error { return event(func(ev *eventbusv1.Event) { ev.MsgId = strings.Repeat("m", n) }) }, maxNameLen},
		{"headers", func(n int) error {
			return event(func(ev *eventbusv1.Event) { ev.Headers = map[string]string{"k": strings.Repeat("v", n-1)} })
		}, maxHeaderBytes},
		{"payload", func(n int) error { return event(func(ev *eventbusv1.Event) { ev.Payload = make([]byte, n) }) }, maxPayload},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(tc.limit); err != nil {
				t.Fatalf("at the limit %d: %v", tc.limit, err)
			}
			if err := tc.check(tc.limit + 1); !errors.Is(err, ErrInvalid) {
				t.Fatalf("one over the limit %d: %v; want ErrInvalid", tc.limit, err)
			}
		})
	}
}
