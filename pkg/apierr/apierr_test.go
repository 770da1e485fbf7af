package apierr_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/apierr"
)

func TestReasonsRoundTrip(t *testing.T) {
	noWorker := apierr.Errorf(codes.FailedPrecondition, apierr.ReasonNoWorker, "no live worker for model %q", "m")
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"nil", nil, codes.OK, ""},
		{"plain error", errors.New("boom"), codes.Unknown, ""},
		{"status without reason", status.Error(codes.NotFound, "gone"), codes.NotFound, ""},
		{"status with reason", noWorker, codes.FailedPrecondition, apierr.ReasonNoWorker},
		{"wrapped status", fmt.Errorf("route: %w", noWorker), codes.FailedPrecondition, apierr.ReasonNoWorker},
		{"empty reason adds no detail", apierr.New(codes.InvalidArgument, "", "bad", nil), codes.InvalidArgument, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := status.Code(tt.err); c != tt.code {
				t.Errorf("code %v, want %v", c, tt.code)
			}
			if r := apierr.Reason(tt.err); r != tt.reason {
				t.Errorf("reason %q, want %q", r, tt.reason)
			}
			if tt.err != nil && !apierr.Is(tt.err, tt.code, tt.reason) {
				t.Errorf("Is(%v, %v, %q) = false", tt.err, tt.code, tt.reason)
			}
			if apierr.Is(tt.err, tt.code, "SOME_OTHER_REASON") {
				t.Errorf("Is matched another reason")
			}
		})
	}
}

func TestInfoCarriesDomainAndMetadata(t *testing.T) {
	err := apierr.New(codes.NotFound, apierr.ReasonUnknownModel, "unknown model", map[string]string{"model": "m"})
	info := apierr.Info(err)
	if info.GetDomain() != apierr.Domain || info.GetReason() != apierr.ReasonUnknownModel || info.GetMetadata()["model"] != "m" {
		t.Fatalf("Info = %v", info)
	}
	if st := status.Convert(err); st.Message() != "unknown model" {
		t.Fatalf("message %q", st.Message())
	}
}
