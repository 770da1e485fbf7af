package registry

import (
	"errors"
	"fmt"
)

// Domain errors of the registry. Store methods wrap them with %w; server.go
// maps them to gRPC codes in one place.
var (
	// ErrInvalid is a request that breaks a rule; the message says which.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound is a lease, key or bucket that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists is a create of something that already exists.
	ErrExists = errors.New("already exists")
	// ErrConflict is a conditional write whose condition did not hold.
	ErrConflict = errors.New("condition failed")
	// ErrTimeout is a wait (a read lock) that ran out.
	ErrTimeout = errors.New("timed out")
	// ErrUnavailable is a backend that cannot be reached right now.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrUnimplemented is an operation the configured backend does not offer
	// (key-value buckets and locks on the kubernetes backend).
	ErrUnimplemented = errors.New("not implemented by this backend")

	// ErrLeaseNotFound is a lease that is gone (revoked, expired) or never
	// was; it wraps ErrNotFound and carries the LEASE_NOT_FOUND reason, so a
	// worker tells a lost lease from a missing key.
	ErrLeaseNotFound = fmt.Errorf("%w: lease", ErrNotFound)
)

func errInvalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
