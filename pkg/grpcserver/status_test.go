package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/apierr"
)

func TestToStatus(t *testing.T) {
	errBad := errors.New("bad")
	errGone := errors.New("gone")
	table := []Code{{errBad, codes.InvalidArgument, ""}, {errGone, codes.NotFound, apierr.ReasonObjectNotFound}}
	unavailable := status.Error(codes.Unavailable, "server stopping")
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		msg    string
		reason string
	}{
		{"nil", nil, codes.OK, "", ""},
		{"sentinel", fmt.Errorf("%w: name is empty", errBad), codes.InvalidArgument, "bad: name is empty", ""},
		{"second sentinel", fmt.Errorf("lookup: %w", errGone), codes.NotFound, "lookup: gone", apierr.ReasonObjectNotFound},
		{"first match wins", errors.Join(errGone, errBad), codes.InvalidArgument, "gone\nbad", ""},
		{"canceled", fmt.Errorf("wait: %w", context.Canceled), codes.Canceled, "wait: context canceled", ""},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "context deadline exceeded", ""},
		{"a status as it is", unavailable, codes.Unavailable, "server stopping", ""},
		{"a wrapped status", fmt.Errorf("recv: %w", unavailable), codes.Unavailable, "recv: rpc error: code = Unavailable desc = server stopping", ""},
		{"anything else", errors.New("boom"), codes.Internal, "boom", ""},
		{"unknown status", status.Error(codes.Unknown, "?"), codes.Internal, "rpc error: code = Unknown desc = ?", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ToStatus(tc.err, table)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("ToStatus(nil) = %v", got)
				}
				return
			}
			st, ok := status.FromError(got)
			if !ok || st.Code() != tc.code || st.Message() != tc.msg {
				t.Errorf("ToStatus(%v) = %v (%q); want %v (%q)", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
			}
			if r := apierr.Reason(got); r != tc.reason {
				t.Errorf("ToStatus(%v) reason %q, want %q", tc.err, r, tc.reason)
			}
		})
	}
}
