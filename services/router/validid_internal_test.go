package router

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/services/router/core"
)

// TestValidIDLimit: a request id of 1 to core.MaxRequestIDLen bytes is
// taken; an empty one and one a byte longer are InvalidArgument, naming
// the bound.
func TestValidIDLimit(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want codes.Code
	}{
		{"r", codes.OK},
		{strings.Repeat("r", core.MaxRequestIDLen), codes.OK},
		{"", codes.InvalidArgument},
		{strings.Repeat("r", core.MaxRequestIDLen+1), codes.InvalidArgument},
	} {
		err := validID(tc.id)
		if got := status.Code(err); got != tc.want {
			t.Fatalf("validID(%d bytes) = %v; want %v", len(tc.id), err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "1..") {
			t.Errorf("validID error %q does not name the bound", err)
		}
	}
}
