package transport

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestNATSMaxPayload checks that a message over the NATS server's
// max_payload fails at once, naming the limit and suggesting tcp, on both
// sides.
func TestNATSMaxPayload(t *testing.T) {
	cfg := testConfig(t, PlaneNATS) // the embedded server allows 4 MiB
	cfg.Limits.MaxMessageSize = 32 << 20
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sendErr := make(chan error, 1)
	s.Handle("big", func(ctx context.Context, req *Request, w ResponseWriter) error {
		err := w.Send(make([]byte, 5<<20))
		sendErr <- err
		return err
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := testClient(t, cfg)
	_, err = c.Call(context.Background(), s.Address("big"), "big", nil, make([]byte, 5<<20))
	if err := errIs(err, ErrTooLarge); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"max_payload", "4194304", "tcp"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("client error %q does not mention %q", err, want)
		}
	}
	err = callErr(context.Background(), c, s.Address("big"), "big", nil)
	if err := errIs(err, ErrTooLarge); err != nil {
		t.Fatal(err)
	}
	herr := waitFor(t, sendErr, "handler Send")
	if err := errIs(herr, ErrTooLarge); err != nil || !strings.Contains(herr.Error(), "max_payload") {
		t.Fatalf("handler Send: %v", herr)
	}
}

// TestNATSCannotConnect checks that an unreachable NATS server is
// ErrCannotConnect for both sides.
func TestNATSCannotConnect(t *testing.T) {
	cfg := testConfig(t, PlaneTCP)
	cfg.Plane = PlaneNATS
	cfg.NATS.URL = "nats://" + deadAddress(t, PlaneTCP).Addr
	if _, err := NewClient(cfg); errIs(err, ErrCannotConnect) != nil {
		t.Fatalf("NewClient: %v", err)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("echo", func(context.Context, *Request, ResponseWriter) error { return nil })
	if err := s.Start(context.Background()); errIs(err, ErrCannotConnect) != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Close()
}

// TestNATSSequenceGap checks that a lost response shows as ErrDisconnected,
// never as a silently shorter stream. A hand-rolled responder skips
// sequence number 1.
func TestNATSSequenceGap(t *testing.T) {
	cfg := testConfig(t, PlaneNATS)
	nc, err := nats.Connect(cfg.NATS.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("gap.test", func(m *nats.Msg) {
		for _, seq := range []uint32{0, 2} {
			msg := []byte{frameData, 0, 0, 0, 0, 'x'}
			binary.BigEndian.PutUint32(msg[1:], seq)
			_ = nc.Publish(m.Reply, msg)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := testClient(t, cfg)
	st, err := c.Call(context.Background(), Address{Kind: PlaneNATS, Addr: "gap.test"}, "echo", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.Recv(); err != nil || string(p) != "x" {
		t.Fatalf("first Recv: %q, %v", p, err)
	}
	_, err = st.Recv()
	if err := errIs(err, ErrDisconnected); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(err.Error(), "sequence") {
		t.Fatalf("error %q does not mention the sequence", err)
	}
}

// TestNATSCancelOvertakesRequest checks that a cancel arriving on the
// control subject before its request (they are separate subscriptions)
// still stops the request.
func TestNATSCancelOvertakesRequest(t *testing.T) {
	cfg := testConfig(t, PlaneNATS)
	th := newTestHandlers()
	ns := testServer(t, cfg, th).(*natsServer)
	reply := "_INBOX.test.1"
	ctl := []byte{frameCancel, 0, 0, 0, 0}
	ns.onControl(&nats.Msg{Data: append(ctl, reply...)})
	ns.onRequest(&nats.Msg{Reply: reply, Data: appendRequestBody(nil, "block", nil, nil)})
	ns.mu.Lock()
	running, remembered := len(ns.streams), len(ns.early)
	ns.mu.Unlock()
	if running != 0 || remembered != 0 {
		t.Fatalf("after an early cancel: %d streams running, %d cancels remembered; want 0 and 0", running, remembered)
	}
	select {
	case <-th.started:
		t.Fatal("the handler ran for a cancelled request")
	default:
	}
}
