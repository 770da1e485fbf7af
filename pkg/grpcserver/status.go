package grpcserver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/apierr"
)

// Code maps a service's domain error (a sentinel, matched with errors.Is) to
// the gRPC code its RPCs answer with and, where the code alone is
// ambiguous, the apierr reason clients branch on.
type Code struct {
	Err    error
	Code   codes.Code
	Reason string
}

// ToStatus turns an RPC's error into the status it returns, once, at the
// edge of the service: the code of the first entry of table whose error err
// wraps; Canceled or DeadlineExceeded for an ended context; a gRPC status
// that err already is (a stream's own failure), unchanged; Internal for
// anything else. The message is err's; an entry's Reason goes into a
// google.rpc.ErrorInfo detail (see pkg/apierr).
func ToStatus(err error, table []Code) error {
	if err == nil {
		return nil
	}
	for _, c := range table {
		if errors.Is(err, c.Err) {
			return apierr.New(c.Code, c.Reason, err.Error(), nil)
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}
