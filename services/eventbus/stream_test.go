package eventbus

import (
	"fmt"
	"maps"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParseAckSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		subject string
		want    ackMeta
		ok      bool
	}{
		{"old form", "$JS.ACK.EVENTS_ns.c1.2.40.39.1700000000123456789.7", ackMeta{delivered: 2, streamSeq: 40, consumerSeq: 39, timestamp: 1700000000123456789, pending: 7}, true},
		{"new form", "$JS.ACK._.ACCHASH.EVENTS_ns.c1.1.5.5.1700000000000000001.0.Xyz1", ackMeta{delivered: 1, streamSeq: 5, consumerSeq: 5, timestamp: 1700000000000000001, pending: 0}, true},
		{"new form without the last token", "$JS.ACK.hub.ACC.EVENTS_ns.c1.1.5.5.10.3", ackMeta{delivered: 1, streamSeq: 5, consumerSeq: 5, timestamp: 10, pending: 3}, true},
		{"new form with more tokens", "$JS.ACK.hub.ACC.EVENTS_ns.c1.1.5.5.10.3.r.later.ones", ackMeta{delivered: 1, streamSeq: 5, consumerSeq: 5, timestamp: 10, pending: 3}, true},
		{"not an ack subject", "_INBOX.abc.1.2.3.4.5.6.7", ackMeta{}, false},
		{"too few tokens", "$JS.ACK.EVENTS_ns.c1.2.40.39.17", ackMeta{}, false},
		{"between the forms", "$JS.ACK.a.b.EVENTS_ns.c1.2.40.39.17", ackMeta{}, false},
		{"not a number", "$JS.ACK.EVENTS_ns.c1.2.x.39.17.0", ackMeta{}, false},
		{"empty number", "$JS.ACK.EVENTS_ns.c1.2..39.17.0", ackMeta{}, false},
		{"timestamp past int64", "$JS.ACK.EVENTS_ns.c1.2.1.1.9223372036854775808.0", ackMeta{}, false},
		{"number past uint64", "$JS.ACK.EVENTS_ns.c1.18446744073709551616.1.1.1.0", ackMeta{}, false},
		{"empty", "", ackMeta{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseAckSubject(tc.subject)
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseAckSubject(%q) = %+v, %v; want %+v, %v", tc.subject, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzParseAckSubject reads arbitrary subjects without failing, and reads
// back the numbers of subjects in either form.
func FuzzParseAckSubject(f *testing.F) {
	f.Add("$JS.ACK.EVENTS_ns.c1.2.40.39.1700000000123456789.7", uint64(1), uint64(2), uint64(3), int64(4), uint64(5), false)
	f.Add("$JS.ACK._.ACC.s.c.1.2.3.4.5.tok", uint64(0), uint64(1<<63), uint64(7), int64(1<<62), uint64(0), true)
	f.Fuzz(func(t *testing.T, s string, delivered, sseq, cseq uint64, ts int64, pending uint64, newForm bool) {
		parseAckSubject(s)
		if ts < 0 {
			ts = -(ts + 1)
		}
		want := ackMeta{delivered: delivered, streamSeq: sseq, consumerSeq: cseq, timestamp: ts, pending: pending}
		subject := fmt.Sprintf("$JS.ACK.EVENTS_ns.c1.%d.%d.%d.%d.%d", delivered, sseq, cseq, ts, pending)
		if newForm {
			subject = fmt.Sprintf("$JS.ACK._.ACC.EVENTS_ns.c1.%d.%d.%d.%d.%d.tok", delivered, sseq, cseq, ts, pending)
		}
		if got, ok := parseAckSubject(subject); !ok || got != want {
			t.Fatalf("parseAckSubject(%q) = %+v, %v; want %+v", subject, got, ok, want)
		}
	})
}

func TestUserHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hdr  nats.Header
		want map[string]string
	}{
		{"none", nil, nil},
		{"msg id alone", nats.Header{"Nats-Msg-Id": {"a"}}, nil},
		{"reserved alone", nats.Header{"Nats-Expected-Stream": {"s"}}, nil},
		{"user headers", nats.Header{"Nats-Msg-Id": {"a"}, "trace": {"t1", "t2"}, "Tenant": {"x"}}, map[string]string{"trace": "t1", "Tenant": "x"}},
		{"empty values", nats.Header{"k": {}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := userHeaders(tc.hdr); !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("userHeaders(%v) = %v; want %v", tc.hdr, got, tc.want)
			}
		})
	}
}
