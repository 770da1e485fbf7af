package worker

import (
	"bytes"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

// LoadSampler decides which load reports a worker publishes (see
// Config.LoadHeartbeat): those that differ from the last ones published,
// but for their timestamps, and the others once the heartbeat has passed
// since. A worker's reports are all published at once (one per rank), and
// compared together. The zero value has published nothing. It is not safe
// for concurrent use.
type LoadSampler struct {
	last, next []byte
	at         time.Time
	published  bool
}

// Due reports whether ms, the reports made at now, are to be published.
// If they are, call Published once they were.
func (s *LoadSampler) Due(now time.Time, heartbeat time.Duration, ms []*workerv1.LoadMetrics) bool {
	s.next = s.next[:0]
	for _, m := range ms {
		ts := m.Timestamp
		m.Timestamp = nil
		// Each report's size first, so that two lists of reports are
		// equal only report by report.
		s.next = protowire.AppendVarint(s.next, uint64(proto.Size(m)))
		var err error
		s.next, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(s.next, m)
		m.Timestamp = ts
		if err != nil {
			return true
		}
	}
	return !s.published || !bytes.Equal(s.next, s.last) || now.Sub(s.at) >= heartbeat
}

// Published records that the reports Due was last asked about were
// published at now.
func (s *LoadSampler) Published(now time.Time) {
	s.last, s.next = s.next, s.last
	s.at, s.published = now, true
}
