package registry

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/apierr"
)

// TestEtcdErrorsTellRetryFromReRegister maps what the etcd client returns
// to the registry's sentinels and on to the wire: a cluster that cannot
// serve right now (unreachable, no leader, an election, a timeout) is
// Unavailable/BACKEND_UNAVAILABLE, so a worker retries; a lease etcd no
// longer has is NotFound/LEASE_NOT_FOUND, so it registers again.
func TestEtcdErrorsTellRetryFromReRegister(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"lease not found", rpctypes.ErrLeaseNotFound, codes.NotFound, apierr.ReasonLeaseNotFound},
		{"lease not found over gRPC", rpctypes.ErrGRPCLeaseNotFound, codes.NotFound, apierr.ReasonLeaseNotFound},
		{"no leader", rpctypes.ErrNoLeader, codes.Unavailable, apierr.ReasonBackendUnavailable},
		{"leader changed", rpctypes.ErrLeaderChanged, codes.Unavailable, apierr.ReasonBackendUnavailable},
		{"request timed out", rpctypes.ErrTimeout, codes.Unavailable, apierr.ReasonBackendUnavailable},
		{"timed out after a leader failure", rpctypes.ErrTimeoutDueToLeaderFail, codes.Unavailable, apierr.ReasonBackendUnavailable},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), codes.Unavailable, apierr.ReasonBackendUnavailable},
		{"our deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), codes.Unavailable, apierr.ReasonBackendUnavailable},
		{"a refusal is not an outage", rpctypes.ErrPermissionDenied, codes.Internal, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mapped := etcdErr("op", tc.err)
			if tc.reason == apierr.ReasonBackendUnavailable && !errors.Is(mapped, ErrUnavailable) {
				t.Fatalf("etcdErr(%v) = %v, want ErrUnavailable", tc.err, mapped)
			}
			got := toStatus(mapped)
			if status.Code(got) != tc.code || apierr.Reason(got) != tc.reason {
				t.Fatalf("on the wire %v = %v (reason %q), want %v/%q", tc.err, got, apierr.Reason(got), tc.code, tc.reason)
			}
		})
	}
}
