package worker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/worker"
)

// mockHandoff is a mock handoff carrying m (marshalled as it is).
func mockHandoff(m *workerv1.MockKvHandoff) *workerv1.KvHandoff {
	b, _ := proto.Marshal(m)
	return &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: b}
}

// TestDecodeMockHandoff: a mock handoff's payload is read when every field
// is valid, each limit at the limit and one past it.
func TestDecodeMockHandoff(t *testing.T) {
	good := &workerv1.MockKvHandoff{HandoffId: "req-1", Address: "127.0.0.1:4000", Blocks: 3}
	padded := mockHandoff(good)
	// Unknown fields pad the payload to exactly the limit, then past it.
	pad := func(n int) []byte {
		b := append([]byte{}, padded.Payload...)
		// Field 15 of type bytes: a one-byte tag, a three-byte length
		// (for 16 KiB to 2 MiB), the bytes.
		body := n - len(b) - 4
		b = protowire.AppendTag(b, 15, protowire.BytesType)
		b = protowire.AppendBytes(b, make([]byte, body))
		if len(b) != n {
			panic(fmt.Sprintf("padded to %d bytes, not %d", len(b), n))
		}
		return b
	}
	tests := []struct {
		name string
		h    *workerv1.KvHandoff
		want *workerv1.MockKvHandoff // nil: ErrInvalidHandoff
	}{
		{"valid", mockHandoff(good), good},
		{"payload at the limit", &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: pad(worker.MaxHandoffPayload)}, good},
		{"payload past the limit", &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: pad(worker.MaxHandoffPayload + 1)}, nil},
		{"id at the limit", mockHandoff(&workerv1.MockKvHandoff{HandoffId: strings.Repeat("x", worker.MaxHandoffID), Address: "h:1", Blocks: 1}),
			&workerv1.MockKvHandoff{HandoffId: strings.Repeat("x", worker.MaxHandoffID), Address: "h:1", Blocks: 1}},
		{"id past the limit", mockHandoff(&workerv1.MockKvHandoff{HandoffId: strings.Repeat("x", worker.MaxHandoffID+1), Address: "h:1", Blocks: 1}), nil},
		{"no handoff", nil, nil},
		{"another kind", &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL, Payload: padded.Payload}, nil},
		{"no kind", &workerv1.KvHandoff{Payload: padded.Payload}, nil},
		{"not protobuf", &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK, Payload: []byte{0xff, 0xff}}, nil},
		{"empty payload", &workerv1.KvHandoff{Kind: commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK}, nil},
		{"no id", mockHandoff(&workerv1.MockKvHandoff{Address: "h:1", Blocks: 1}), nil},
		{"no blocks", mockHandoff(&workerv1.MockKvHandoff{HandoffId: "a", Address: "h:1"}), nil},
		{"no port", mockHandoff(&workerv1.MockKvHandoff{HandoffId: "a", Address: "h", Blocks: 1}), nil},
		{"port 0", mockHandoff(&workerv1.MockKvHandoff{HandoffId: "a", Address: "h:0", Blocks: 1}), nil},
		{"port past 65535", mockHandoff(&workerv1.MockKvHandoff{HandoffId: "a", Address: "h:65536", Blocks: 1}), nil},
		{"no host", mockHandoff(&workerv1.MockKvHandoff{HandoffId: "a", Address: ":80", Blocks: 1}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := worker.DecodeMockHandoff(tt.h)
			if tt.want == nil {
				if !errors.Is(err, worker.ErrInvalidHandoff) {
					t.Fatalf("DecodeMockHandoff = %v, %v; want ErrInvalidHandoff", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got, protocmp.Transform(), protocmp.IgnoreUnknown()); d != "" {
				t.Fatalf("payload (-want +got):\n%s", d)
			}
		})
	}
}

// FuzzDecodeMockHandoff: any payload and kind is decoded or refused with
// ErrInvalidHandoff, never a panic; what is accepted meets every check and
// survives a round trip.
func FuzzDecodeMockHandoff(f *testing.F) {
	f.Add(int32(commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK), mockHandoff(&workerv1.MockKvHandoff{HandoffId: "r", Address: "127.0.0.1:9", Blocks: 2}).Payload)
	f.Add(int32(commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK), mockHandoff(&workerv1.MockKvHandoff{HandoffId: "r", Address: "[::1]:65535", Blocks: 1 << 31}).Payload)
	f.Add(int32(commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK), []byte{})
	f.Add(int32(commonv1.KvTransferKind_KV_TRANSFER_KIND_NIXL), []byte("{}"))
	f.Add(int32(99), []byte{0x0a, 0x01, 'x'})
	f.Fuzz(func(t *testing.T, kind int32, payload []byte) {
		h := &workerv1.KvHandoff{Kind: commonv1.KvTransferKind(kind), Payload: payload}
		m, err := worker.DecodeMockHandoff(h)
		if err != nil {
			if !errors.Is(err, worker.ErrInvalidHandoff) {
				t.Fatalf("error %v is not ErrInvalidHandoff", err)
			}
			return
		}
		if m.HandoffId == "" || len(m.HandoffId) > worker.MaxHandoffID || m.Blocks == 0 || len(payload) > worker.MaxHandoffPayload {
			t.Fatalf("accepted %v", m)
		}
		again, err := worker.DecodeMockHandoff(mockHandoff(m))
		if err != nil || !proto.Equal(again, m) {
			t.Fatalf("round trip: %v, %v", again, err)
		}
	})
}
