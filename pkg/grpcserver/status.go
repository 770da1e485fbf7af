package grpcserver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code maps a service's domain error (a sentinel, matched with errors.Is) to
// the gRPC code its RPCs answer with.
type Code struct {
	Err  error
	Code codes.Code
}

// ToStatus turns an RPC's error into the status it returns, once, at the
// edge of the service: the code of the first entry of table whose error err
// wraps; Canceled or DeadlineExceeded for an ended context; a gRPC status
// that err already is (a stream's own failure), unchanged; Internal for
// anything else. The message is err's.
func ToStatus(err error, table []Code) error {
	if err == nil {
		return nil
	}
	for _, c := range table {
		if errors.Is(err, c.Err) {
			return status.Error(c.Code, err.Error())
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
