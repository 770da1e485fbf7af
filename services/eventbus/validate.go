package eventbus

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
)

// Domain errors. Every error the service returns wraps one of them; server.go
// maps them to gRPC codes.
var (
	// ErrInvalid is a request that can never succeed as given.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound is a stream, consumer, bucket or object that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable is NATS being unreachable or too slow; retry later.
	ErrUnavailable = errors.New("unavailable")
	// ErrDataLoss is stored data that does not match its sha256.
	ErrDataLoss = errors.New("data loss")

	// The specific cases clients branch on, each wrapping one of the above;
	// server.go gives them their apierr reasons.

	// ErrObjectNotFound is an object-store bucket or object that does not
	// exist.
	ErrObjectNotFound = fmt.Errorf("%w: object", ErrNotFound)
	// ErrPayloadTooLarge is an event over the NATS server's max_payload.
	ErrPayloadTooLarge = fmt.Errorf("%w: payload too large", ErrInvalid)
	// ErrBufferFull is a publish refused at once because NATS is
	// reconnecting and the reconnect buffer is full.
	ErrBufferFull = fmt.Errorf("%w: reconnect buffer full", ErrUnavailable)
)

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

const (
	maxSubjectLen  = 512
	maxNameLen     = 128
	maxHeaderBytes = 16 << 10
)

// checkName accepts a namespace, durable or bucket name: 1-128 of
// [A-Za-z0-9_-], which NATS accepts inside stream, consumer and bucket names
// and which cannot be a subject wildcard or separator.
func checkName(what, name string) error {
	if name == "" {
		return invalidf("%s must not be empty", what)
	}
	if len(name) > maxNameLen {
		return invalidf("%s %.32q... is %d bytes, over the limit of %d", what, name, len(name), maxNameLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return invalidf("%s %q: character %q is not allowed; use letters, digits, '_' and '-'", what, name, r)
		}
	}
	return nil
}

// checkSubject accepts a subject to publish on or to filter by: tokens
// separated by dots, none empty, no whitespace or control characters, at least
// minTokens of them. With wildcards false, * and > are refused anywhere; with
// wildcards true they may stand as whole tokens (> last only).
func checkSubject(subject string, minTokens int, wildcards bool) error {
	if subject == "" {
		return invalidf("subject must not be empty")
	}
	if len(subject) > maxSubjectLen {
		return invalidf("subject is %d bytes, over the limit of %d", len(subject), maxSubjectLen)
	}
	if !utf8.ValidString(subject) {
		return invalidf("subject %q is not valid UTF-8", subject)
	}
	n := 0
	for rest, more := subject, true; more; n++ {
		var tok string
		tok, rest, more = strings.Cut(rest, ".")
		if tok == "" {
			return invalidf("subject %q has an empty token at position %d", subject, n+1)
		}
		if blankOrControl(tok) {
			return invalidf("subject %q contains whitespace or a control character", subject)
		}
		if strings.ContainsAny(tok, "*>") {
			if !wildcards {
				return invalidf("subject %q contains a wildcard (* or >); publish needs a literal subject", subject)
			}
			if tok != "*" && tok != ">" {
				return invalidf("subject %q: wildcards must be whole tokens", subject)
			}
			if tok == ">" && more {
				return invalidf("subject %q: > must be the last token", subject)
			}
		}
	}
	if n < minTokens {
		return invalidf("subject %q has %d tokens; want {namespace}.{component}.{event_name}", subject, n)
	}
	return nil
}

// blankOrControl reports whether s holds whitespace or a control character.
func blankOrControl(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return strings.IndexFunc(s[i:], func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0
		}
		if c <= ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// namespaceOf is the first token of a subject.
func namespaceOf(subject string) string {
	ns, _, _ := strings.Cut(subject, ".")
	return ns
}

// validateEvent checks an event to publish against maxPayload (the NATS
// server's max_payload) and returns its namespace.
func validateEvent(ev *eventbusv1.Event, maxPayload int64) (string, error) {
	if ev == nil {
		return "", invalidf("event must be set")
	}
	if err := checkSubject(ev.GetSubject(), 3, false); err != nil {
		return "", err
	}
	ns := namespaceOf(ev.GetSubject())
	if err := checkName("namespace (first subject token)", ns); err != nil {
		return "", err
	}
	if len(ev.GetMsgId()) > maxNameLen || strings.IndexFunc(ev.GetMsgId(), func(r rune) bool { return unicode.IsControl(r) }) >= 0 {
		return "", invalidf("msg_id must be at most %d bytes without control characters", maxNameLen)
	}
	size := 0
	for k, v := range ev.GetHeaders() {
		if k == "" || strings.IndexFunc(k, func(r rune) bool { return r <= ' ' || r == ':' || r >= 0x7f }) >= 0 {
			return "", invalidf("header name %q must be non-empty printable ASCII without ':' or spaces", k)
		}
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			return "", invalidf("header name %q: the Nats- prefix is reserved", k)
		}
		if strings.HasPrefix(strings.ToLower(k), strings.ToLower(EnvelopeHeader)) {
			return "", invalidf("header name %q: the %s prefix is reserved to the eventbus", k, EnvelopeHeader)
		}
		if strings.ContainsAny(v, "\r\n") {
			return "", invalidf("header %q value must not contain line breaks", k)
		}
		size += len(k) + len(v)
	}
	if size > maxHeaderBytes {
		return "", invalidf("headers are %d bytes, over the limit of %d", size, maxHeaderBytes)
	}
	// NATS counts the encoded headers against max_payload too.
	if n, h := int64(len(ev.GetPayload())), int64(headerBytes(ev)); n+h > maxPayload {
		return "", fmt.Errorf("%w: %d bytes (plus %d bytes of headers) is over the NATS server's max_payload of %d bytes", ErrPayloadTooLarge, n, h, maxPayload)
	}
	return ns, nil
}

// headerBytes is the size of an event's headers as NATS encodes them:
// "NATS/1.0\r\n", "Name: value\r\n" per header (the msg id among them), a
// final "\r\n".
func headerBytes(ev *eventbusv1.Event) int {
	if len(ev.GetHeaders()) == 0 && ev.GetMsgId() == "" {
		return 0
	}
	n := len("NATS/1.0\r\n") + 2
	for k, v := range ev.GetHeaders() {
		n += len(k) + len(v) + 4
	}
	if id := ev.GetMsgId(); id != "" {
		n += len("Nats-Msg-Id") + len(id) + 4
	}
	return n
}

// subscription is a validated SubscribeRequest.
type subscription struct {
	namespace, filter, durable string
	bind, autoAck              bool
	policy                     eventbusv1.DeliverPolicy
	startSeq                   uint64
	startTime                  time.Time
	ackWait                    time.Duration
	maxAckPending              int
}

// validateSubscribe checks a SubscribeRequest before any I/O.
func validateSubscribe(req *eventbusv1.SubscribeRequest) (subscription, error) {
	s := subscription{
		namespace:     req.GetNamespace(),
		filter:        req.GetFilterSubject(),
		durable:       req.GetDurableName(),
		bind:          req.GetBind(),
		autoAck:       req.GetAutoAck(),
		policy:        req.GetDeliverPolicy(),
		startSeq:      req.GetStartSequence(),
		ackWait:       30 * time.Second,
		maxAckPending: 1000,
	}
	if err := checkName("namespace", s.namespace); err != nil {
		return s, err
	}
	if s.filter == "" {
		s.filter = s.namespace + ".>"
	} else {
		if err := checkSubject(s.filter, 2, true); err != nil {
			return s, err
		}
		if namespaceOf(s.filter) != s.namespace {
			return s, invalidf("filter_subject %q is outside namespace %q; it must start with %q", s.filter, s.namespace, s.namespace+".")
		}
	}
	if s.durable != "" {
		if err := checkName("durable_name", s.durable); err != nil {
			return s, err
		}
	} else if s.bind {
		return s, invalidf("bind needs a durable_name")
	}
	switch s.policy {
	case eventbusv1.DeliverPolicy_DELIVER_POLICY_UNSPECIFIED, eventbusv1.DeliverPolicy_DELIVER_POLICY_NEW,
		eventbusv1.DeliverPolicy_DELIVER_POLICY_ALL:
		if s.startSeq != 0 || req.GetStartTime() != nil {
			return s, invalidf("deliver policy %s takes neither start_sequence nor start_time", s.policy)
		}
	case eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_SEQUENCE:
		if s.startSeq == 0 {
			return s, invalidf("deliver policy %s needs start_sequence >= 1", s.policy)
		}
		if req.GetStartTime() != nil {
			return s, invalidf("deliver policy %s does not take start_time", s.policy)
		}
	case eventbusv1.DeliverPolicy_DELIVER_POLICY_BY_START_TIME:
		if req.GetStartTime() == nil {
			return s, invalidf("deliver policy %s needs start_time", s.policy)
		}
		if err := req.GetStartTime().CheckValid(); err != nil {
			return s, invalidf("start_time: %v", err)
		}
		if s.startSeq != 0 {
			return s, invalidf("deliver policy %s does not take start_sequence", s.policy)
		}
		s.startTime = req.GetStartTime().AsTime()
	default:
		return s, invalidf("deliver policy %d is unknown; valid values are NEW, ALL, BY_START_SEQUENCE, BY_START_TIME", int32(s.policy))
	}
	if d := req.GetAckWait(); d != nil {
		if err := d.CheckValid(); err != nil {
			return s, invalidf("ack_wait: %v", err)
		}
		if w := d.AsDuration(); w < 0 {
			return s, invalidf("ack_wait %s must not be negative", w)
		} else if w > 0 {
			if w < 10*time.Millisecond {
				return s, invalidf("ack_wait %s is under the minimum of 10ms", w)
			}
			s.ackWait = w
		}
	}
	switch n := req.GetMaxAckPending(); {
	case n < 0:
		return s, invalidf("max_ack_pending %d must not be negative", n)
	case n > 0:
		s.maxAckPending = int(n)
	}
	return s, nil
}

// checkAckToken accepts a JetStream ack subject as Subscribe hands it out:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>, or
// the 12-token form with domain and account hash, with no wildcards, empty
// tokens or whitespace, so that Ack cannot publish anywhere else.
// A partial token (partialAck and such a subject) is accepted too.
func checkAckToken(token string) error {
	token = strings.TrimPrefix(token, partialAck)
	if !strings.HasPrefix(token, "$JS.ACK.") {
		return invalidf("ack token %.64q is not one that Subscribe delivered", token)
	}
	if err := checkSubject(token, 9, false); err != nil {
		return invalidf("ack token %.64q is malformed", token)
	}
	if n := strings.Count(token, ".") + 1; n != 9 && n < 12 {
		return invalidf("ack token %.64q has %d tokens; it is not one that Subscribe delivered", token, n)
	}
	return nil
}

// checkObjectName accepts an object name: 1-1024 bytes of valid UTF-8
// without control characters.
func checkObjectName(name string) error {
	if name == "" {
		return invalidf("object name must not be empty")
	}
	if len(name) > 1024 {
		return invalidf("object name is %d bytes, over the limit of 1024", len(name))
	}
	if !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return invalidf("object name %q must be valid UTF-8 without control characters", name)
	}
	return nil
}
