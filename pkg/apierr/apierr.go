// Package apierr is Switchyard's error contract on the wire: a gRPC code
// plus, where the code alone is ambiguous, a google.rpc.ErrorInfo detail
// whose reason is one of the constants below (domain Domain). The protos
// document, on each RPC, which codes and reasons it answers; servers build
// them with grpcserver.ToStatus (or New here) and clients branch with Is and
// Reason. Nobody matches message text: messages are for people and may
// change.
//
// As etcd publishes its error table once (api/v3rpc/rpctypes), this package
// is the one table both sides import; another language reads the same
// reason strings from the proto comments.
package apierr

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every Switchyard reason.
const Domain = "switchyard.llm"

// Reasons, by the service that answers them. A reason is UPPER_SNAKE_CASE
// and stable: clients branch on it.
const (
	// ReasonUnknownModel: the router (or frontend) has no model card for the
	// requested model. Code NotFound.
	ReasonUnknownModel = "UNKNOWN_MODEL"
	// ReasonUnknownEndpoint: no instance ever registered the requested
	// namespace/component/endpoint. Code NotFound.
	ReasonUnknownEndpoint = "UNKNOWN_ENDPOINT"
	// ReasonNoWorker: the target is known but no live worker is eligible (all
	// gone, all excluded, or direct mode named one that does not serve it).
	// Code FailedPrecondition: retrying the same request elsewhere does not
	// help until the worker set changes.
	ReasonNoWorker = "NO_WORKER"

	// ReasonLeaseNotFound: the registry has no such lease (revoked, expired,
	// or never granted). Code NotFound. A worker registers again.
	ReasonLeaseNotFound = "LEASE_NOT_FOUND"
	// ReasonLeaseTokenRequired: a call on a lease did not present that
	// lease's secret token (the one GrantLease returned) in the
	// switchyard-lease-token metadata. Code PermissionDenied.
	ReasonLeaseTokenRequired = "LEASE_TOKEN_REQUIRED"
	// ReasonBackendUnavailable: the service is up but its backend (etcd,
	// Kubernetes, NATS) is not reachable right now. Code Unavailable; retry
	// with backoff, on this replica or another.
	ReasonBackendUnavailable = "BACKEND_UNAVAILABLE"

	// ReasonObjectNotFound: the eventbus object store has no such object
	// (or bucket). Code NotFound.
	ReasonObjectNotFound = "OBJECT_NOT_FOUND"
	// ReasonPayloadTooLarge: an event is over the NATS server's max_payload;
	// the message names the limit. Code InvalidArgument.
	ReasonPayloadTooLarge = "PAYLOAD_TOO_LARGE"
	// ReasonChecksumMismatch: object data does not match its sha256. Code
	// DataLoss.
	ReasonChecksumMismatch = "CHECKSUM_MISMATCH"
	// ReasonReconnectBufferFull: the eventbus's NATS connection is
	// reconnecting and its reconnect buffer is full, so the publish was
	// refused at once. Code Unavailable; publish again once NATS is back.
	ReasonReconnectBufferFull = "RECONNECT_BUFFER_FULL"

	// ReasonKVEventsOutOfRange: a worker's ring of recent KV events no
	// longer reaches the event id asked for (GetKvEvents, WatchKvEvents).
	// Code OUT_OF_RANGE; the caller rebuilds from GetKvState.
	ReasonKVEventsOutOfRange = "KV_EVENTS_OUT_OF_RANGE"

	// ReasonKVHandoffNotFound: a worker holds no KV under the handoff id
	// asked for (PullKvHandoff): never held, already pulled, released or
	// past its hold. Code NOT_FOUND; the request's prompt must be
	// prefilled again.
	ReasonKVHandoffNotFound = "KV_HANDOFF_NOT_FOUND"
)

// New returns a status error with code, message msg and, when reason is not
// empty, an ErrorInfo with reason and metadata md (may be nil).
func New(code codes.Code, reason, msg string, md map[string]string) error {
	st := status.New(code, msg)
	if reason == "" {
		return st.Err()
	}
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: md})
	if err != nil {
		// Only a detail that does not marshal fails; ErrorInfo always does.
		return st.Err()
	}
	return withInfo.Err()
}

// Errorf is New with a formatted message and no metadata.
func Errorf(code codes.Code, reason, format string, args ...any) error {
	return New(code, reason, fmt.Sprintf(format, args...), nil)
}

// Info returns err's Switchyard ErrorInfo, or nil when it has none (or err
// is not a gRPC status).
func Info(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok || st == nil {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info
		}
	}
	return nil
}

// Reason returns err's Switchyard reason, or "" when it has none.
func Reason(err error) string { return Info(err).GetReason() }

// Is reports whether err is a status with code and, when reason is not
// empty, that reason.
func Is(err error, code codes.Code, reason string) bool {
	if err == nil || status.Code(err) != code {
		return false
	}
	return reason == "" || Reason(err) == reason
}
