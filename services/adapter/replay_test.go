package adapter

import (
	"context"
	"encoding/binary"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
	"github.com/switchyard-llm/switchyard/pkg/testport"
)

// TestReplayFillsAGap stands in for vLLM's replay socket (a ROUTER answering
// [sequence, payload] messages from the requested sequence on, then an empty
// payload) and checks that a gap is filled, in order, before the message
// that revealed it.
func TestReplayFillsAGap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Held for the test: zmq4 binds it, no other process can.
	endpoint := "tcp://" + testport.Shareable(t)

	// The engine's buffered messages 1..4: each stores one 4-token block
	// chained to the previous one.
	tokens := u32s(16, 700)
	payloads := map[uint64][]byte{}
	for i := uint64(1); i <= 4; i++ {
		ev := []any{"BlockStored", []any{100 + i}, nil, toks(4, 700+int(i-1)*4), 4, nil, "GPU"}
		if i > 1 {
			ev[2] = 100 + i - 1
		}
		payloads[i] = pack(t, []any{1.5, []any{ev}, nil})
	}
	router := zmq4.NewRouter(ctx)
	defer router.Close()
	if err := router.Listen(endpoint); err != nil {
		t.Fatal(err)
	}
	served := make(chan uint64, 1)
	go func() {
		msg, err := router.Recv()
		if err != nil {
			return
		}
		// [identity, delimiter, start sequence]
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[len(msg.Frames)-1])
		served <- start
		var seq [8]byte
		for i := start; i <= 4; i++ {
			binary.BigEndian.PutUint64(seq[:], i)
			_ = router.Send(zmq4.NewMsgFrom(id, []byte{}, append([]byte(nil), seq[:]...), payloads[i]))
		}
		end := [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		_ = router.Send(zmq4.NewMsgFrom(id, []byte{}, end[:], []byte{}))
	}()

	stats := &Stats{}
	log := slog.New(slog.DiscardHandler)
	tr := NewTranslator(4, 1024, log, stats)
	rp := newReplayer(endpoint, log)
	defer rp.close()
	var published []*workerv1.KvEventBatch
	publish := func(b *workerv1.KvEventBatch) { published = append(published, b) }
	frame := func(seq uint64) [][]byte {
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], seq)
		return [][]byte{[]byte("kv-events"), s[:], payloads[seq]}
	}
	// Message 1 arrives, 2 and 3 are lost, 4 arrives.
	for _, seq := range []uint64{1, 4} {
		fillGap(ctx, rp, tr, stats, log, frame(seq), publish)
		if b := HandleMessage(tr, stats, log, frame(seq)); b != nil {
			publish(b)
		}
	}
	if start := <-served; start != 2 {
		t.Fatalf("replay asked from %d, want 2", start)
	}
	if stats.Replayed.Load() != 2 || stats.Gaps.Load() != 0 {
		t.Fatalf("replayed %d, gaps %d; want 2 and 0", stats.Replayed.Load(), stats.Gaps.Load())
	}
	if len(published) != 4 {
		t.Fatalf("published %d batches, want 4", len(published))
	}
	want := kvhash.Hashes(tokens, 4, nil)
	for i, b := range published {
		blocks := b.Events[0].GetStored().GetBlocks()
		if b.FirstEventId != uint64(i+1) || len(blocks) != 1 || blocks[0].SequenceHash != want[i].Sequence {
			t.Fatalf("batch %d = %v, want sequence hash %x", i, b, want[i].Sequence)
		}
	}
}
