package adapter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"
)

// replayTimeout bounds one replay exchange with the engine.
const replayTimeout = 2 * time.Second

var errReplayTimeout = errors.New("kv events: replay timed out")

// replayer asks the engine's replay socket (vLLM's ROUTER socket, the
// `replay_endpoint` of its ZMQ publisher) for the messages a gap lost: it
// sends the first missing sequence number as 8 big-endian bytes and reads
// [sequence, payload] messages until an empty payload ends the replay.
type replayer struct {
	endpoint string
	log      *slog.Logger
	sock     zmq4.Socket
}

func newReplayer(endpoint string, log *slog.Logger) *replayer {
	return &replayer{endpoint: endpoint, log: log}
}

// replayed is one message a replay returned.
type replayed struct {
	seq     uint64
	payload []byte
}

// fetch returns the messages with sequence numbers in [from, to], in order.
func (r *replayer) fetch(ctx context.Context, from, to uint64) ([]replayed, error) {
	if r.sock == nil {
		s := zmq4.NewDealer(ctx)
		if err := s.Dial(r.endpoint); err != nil {
			s.Close()
			return nil, fmt.Errorf("kv events: replay socket: %w", err)
		}
		r.sock = s
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	// A DEALER talking to a ROUTER that expects REQ framing sends the empty
	// delimiter itself.
	if err := r.sock.Send(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		r.reset()
		return nil, fmt.Errorf("kv events: replay request: %w", err)
	}
	type recv struct {
		msg zmq4.Msg
		err error
	}
	var out []replayed
	deadline := time.NewTimer(replayTimeout)
	defer deadline.Stop()
	for {
		ch := make(chan recv, 1)
		sock := r.sock
		go func() {
			m, err := sock.Recv()
			ch <- recv{m, err}
		}()
		var got recv
		select {
		case got = <-ch:
		case <-deadline.C:
			r.reset() // ends the pending Recv
			<-ch
			return out, errReplayTimeout
		case <-ctx.Done():
			r.reset()
			<-ch
			return out, ctx.Err()
		}
		if got.err != nil {
			r.reset()
			return out, fmt.Errorf("kv events: replay: %w", got.err)
		}
		frames := got.msg.Frames
		if len(frames) > 0 && len(frames[0]) == 0 {
			frames = frames[1:] // the delimiter
		}
		if len(frames) != 2 || len(frames[0]) != 8 {
			return out, fmt.Errorf("kv events: replay message has %d frames, want [sequence, payload]", len(frames))
		}
		if len(frames[1]) == 0 {
			return out, nil // end of replay
		}
		seq := binary.BigEndian.Uint64(frames[0])
		if seq >= from && seq <= to {
			out = append(out, replayed{seq: seq, payload: frames[1]})
		}
	}
}

func (r *replayer) reset() {
	if r.sock != nil {
		r.sock.Close()
		r.sock = nil
	}
}

func (r *replayer) close() { r.reset() }
