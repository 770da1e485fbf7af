package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// KVHandoffServer serves the mock KV transfer's WorkerService calls
// (Config.KVHandoffs): the decode worker pulls a prefill leg's held blocks,
// and a request that ended before its decode leg releases them. Errors are
// gRPC statuses (NotFound with reason KV_HANDOFF_NOT_FOUND for a handoff no
// longer held) or become Unknown.
type KVHandoffServer interface {
	PullKvHandoff(context.Context, *workerv1.PullKvHandoffRequest) (*workerv1.PullKvHandoffResponse, error)
	ReleaseKvHandoff(context.Context, *workerv1.ReleaseKvHandoffRequest) (*workerv1.ReleaseKvHandoffResponse, error)
}

// MaxHandoffPayload is the most bytes a KvHandoff's payload may carry.
const MaxHandoffPayload = 64 << 10

// MaxHandoffID is the longest handoff id a mock payload may carry, in bytes.
const MaxHandoffID = 256

// CodeKVHandoffFailed is the handler error code (transport.HandlerError) of
// a decode leg whose KV could not be taken: the prefill worker no longer
// holds it (pulled, released or past its hold), is gone, or did not answer
// within the decode worker's bound. Nothing was generated; the request can
// be prefilled again (on another prefill worker or locally). Over
// WorkerService it is Unavailable.
const CodeKVHandoffFailed = "kv_handoff_failed"

// ErrInvalidHandoff is returned by DecodeMockHandoff for a handoff that is
// not a valid mock one; the message says why.
var ErrInvalidHandoff = errors.New("invalid KV handoff")

// DecodeMockHandoff reads and checks the payload of a mock KV handoff (the
// mocker's transfer): kind KV_TRANSFER_KIND_MOCK, a payload of at most
// MaxHandoffPayload bytes holding a MockKvHandoff with a handoff id of 1 to
// MaxHandoffID bytes, a host:port address and at least one block. It fails
// with ErrInvalidHandoff.
func DecodeMockHandoff(h *workerv1.KvHandoff) (*workerv1.MockKvHandoff, error) {
	switch {
	case h == nil:
		return nil, fmt.Errorf("%w: no handoff", ErrInvalidHandoff)
	case h.GetKind() != commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK:
		kind := wire.TransferKindName(h.GetKind())
		if kind == "" {
			kind = "unset (" + strconv.Itoa(int(h.GetKind())) + ")"
		}
		return nil, fmt.Errorf("%w: kind %s, this worker speaks %s", ErrInvalidHandoff,
			kind, wire.TransferKindName(commonv1.KvTransferKind_KV_TRANSFER_KIND_MOCK))
	case len(h.GetPayload()) > MaxHandoffPayload:
		return nil, fmt.Errorf("%w: payload of %d bytes, past %d", ErrInvalidHandoff, len(h.GetPayload()), MaxHandoffPayload)
	}
	m := &workerv1.MockKvHandoff{}
	if err := proto.Unmarshal(h.GetPayload(), m); err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrInvalidHandoff, err)
	}
	switch {
	case m.GetHandoffId() == "" || len(m.GetHandoffId()) > MaxHandoffID:
		return nil, fmt.Errorf("%w: handoff id of %d bytes, want 1 to %d", ErrInvalidHandoff, len(m.GetHandoffId()), MaxHandoffID)
	case m.GetBlocks() == 0:
		return nil, fmt.Errorf("%w: no blocks", ErrInvalidHandoff)
	}
	host, port, err := net.SplitHostPort(m.GetAddress())
	if p, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || p == 0 {
		return nil, fmt.Errorf("%w: address %q is not host:port", ErrInvalidHandoff, m.GetAddress())
	}
	return m, nil
}

// PullKvHandoff implements WorkerService through Config.KVHandoffs.
func (a *api) PullKvHandoff(ctx context.Context, req *workerv1.PullKvHandoffRequest) (*workerv1.PullKvHandoffResponse, error) {
	if a.w.cfg.KVHandoffs == nil {
		return nil, status.Error(codes.Unimplemented, "this worker hands over no KV")
	}
	return a.w.cfg.KVHandoffs.PullKvHandoff(ctx, req)
}

// ReleaseKvHandoff implements WorkerService through Config.KVHandoffs.
func (a *api) ReleaseKvHandoff(ctx context.Context, req *workerv1.ReleaseKvHandoffRequest) (*workerv1.ReleaseKvHandoffResponse, error) {
	if a.w.cfg.KVHandoffs == nil {
		return nil, status.Error(codes.Unimplemented, "this worker hands over no KV")
	}
	return a.w.cfg.KVHandoffs.ReleaseKvHandoff(ctx, req)
}

// validateDisaggregation checks a worker's role and KV transfer: a known
// role; a prefill or decode worker names how its KV moves; an aggregated
// one hands no KV over.
func validateDisaggregation(role commonv1.Role, t *commonv1.KvTransfer) error {
	switch role {
	case commonv1.Role_ROLE_UNSPECIFIED, commonv1.Role_ROLE_AGG:
		if t != nil {
			return fmt.Errorf("worker: a KV transfer is set on an aggregated worker; only prefill and decode workers hand KV over")
		}
		return nil
	case commonv1.Role_ROLE_PREFILL, commonv1.Role_ROLE_DECODE:
		if t.GetKind() == commonv1.KvTransferKind_KV_TRANSFER_KIND_UNSPECIFIED {
			return fmt.Errorf("worker: a %s worker needs a KV transfer kind (%s)", wire.RoleName(role), strings.Join(wire.TransferKindNames, ", "))
		}
		if _, ok := commonv1.KvTransferKind_name[int32(t.GetKind())]; !ok {
			return fmt.Errorf("worker: KV transfer kind %d: valid values are %s", int32(t.GetKind()), strings.Join(wire.TransferKindNames, ", "))
		}
		return nil
	}
	return fmt.Errorf("worker: role %d: valid values are %s", int32(role), strings.Join(wire.RoleNames, ", "))
}

// registeredTransfer is the KV transfer as registered: an empty address is
// the worker's WorkerService (where the mock transfer pulls from).
func (w *Worker) registeredTransfer() *commonv1.KvTransfer {
	t := w.cfg.KVTransfer
	if t == nil {
		return nil
	}
	t = proto.Clone(t).(*commonv1.KvTransfer)
	if t.Address == "" {
		t.Address = w.apiAddr()
	}
	return t
}

// DisaggFlags is a worker command's --disaggregation-mode and, for a
// command whose KV transfer is the engine's (the adapter), the transfer
// flags (RegisterTransferFlags).
type DisaggFlags struct {
	// Mode is agg, prefill or decode.
	Mode string
	// TransferKind, TransferEngineID, TransferAddr and DataParallelSize
	// are --kv-transfer-kind, --kv-transfer-engine-id, --kv-transfer-addr
	// and --data-parallel-size.
	TransferKind, TransferEngineID, TransferAddr string
	DataParallelSize                             int
}

// RegisterTransferFlags adds --kv-transfer-kind, --kv-transfer-engine-id,
// --kv-transfer-addr and --data-parallel-size: what a partner needs to
// reach the engine's KV when the worker is a prefill or decode one.
func (f *DisaggFlags) RegisterTransferFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.TransferKind, "kv-transfer-kind", "", "how the engine's KV moves to or from its partner with --disaggregation-mode prefill or decode: "+strings.Join(wire.TransferKindNames, ", "))
	fs.StringVar(&f.TransferEngineID, "kv-transfer-engine-id", "", "the engine's id in its KV transfer (vLLM's engine_id for nixl)")
	fs.StringVar(&f.TransferAddr, "kv-transfer-addr", "", "the engine's bootstrap or KV transfer address, host:port (SGLang's bootstrap server)")
	fs.IntVar(&f.DataParallelSize, "data-parallel-size", 1, "the engine's data-parallel size")
}

// Transfer is the KV transfer the flags name: nil for an aggregated
// worker or without --kv-transfer-kind; call Validate first.
func (f DisaggFlags) Transfer() *commonv1.KvTransfer {
	r := f.Role()
	if f.TransferKind == "" || (r != commonv1.Role_ROLE_PREFILL && r != commonv1.Role_ROLE_DECODE) {
		return nil
	}
	k, _ := wire.ParseTransferKind(f.TransferKind)
	return &commonv1.KvTransfer{Kind: k, EngineId: f.TransferEngineID, Address: f.TransferAddr, DataParallelSize: uint32(max(f.DataParallelSize, 0))}
}

// RegisterFlags adds --disaggregation-mode.
func (f *DisaggFlags) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.Mode, "disaggregation-mode", wire.RoleAgg, "the part of requests this worker serves: "+strings.Join(wire.RoleNames, ", ")+
		" (prefill computes prompts and hands their KV to a decode worker)")
}

// Role is the parsed mode; call Validate first.
func (f DisaggFlags) Role() commonv1.Role {
	r, _ := wire.ParseRole(f.Mode)
	return r
}

// Validate checks the mode.
func (f DisaggFlags) Validate() error {
	if _, err := wire.ParseRole(f.Mode); err != nil {
		return errors.New("--disaggregation-mode: " + err.Error())
	}
	if f.TransferKind != "" {
		if _, err := wire.ParseTransferKind(f.TransferKind); err != nil {
			return errors.New("--kv-transfer-kind: " + err.Error())
		}
	}
	if f.DataParallelSize < 0 || f.DataParallelSize > 1024 {
		return fmt.Errorf("--data-parallel-size %d must be at most 1024 and not negative", f.DataParallelSize)
	}
	return nil
}
