package router

import (
	"errors"
	"io"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
)

// Report applies batches of prefill completions and frees from a client's
// stream, each exactly as MarkPrefillComplete and Free would: a frontend
// then spends one round trip per request (Route) instead of three.
func (s *server) Report(stream routerv1.RouterService_ReportServer) error {
	var batches uint64
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&routerv1.ReportResponse{Batches: batches})
		}
		if err != nil {
			return err
		}
		// Validate the whole batch first, so that a bad one changes nothing.
		for _, ids := range [][]string{r.GetPrefillComplete(), r.GetFree()} {
			for _, id := range ids {
				if err := validID(id); err != nil {
					return err
				}
			}
		}
		for _, id := range r.GetPrefillComplete() {
			s.core.PrefillDone(id)
		}
		for _, id := range r.GetFree() {
			s.core.Free(id)
		}
		batches++
	}
}
