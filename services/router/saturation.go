package router

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
)

// maxWatchedModels bounds a WatchSaturationRequest's list of models.
const maxWatchedModels = 4096

// WatchSaturation streams the watched models' saturation, room and
// capacity (sent with a change of the other two, not alone): all of them
// first, then those whose saturation or room changed, recomputed after
// every change of the core's load record or worker set, and when the passing of time alone
// makes room (a worker's head of queue computing on: core.SaturationNext).
// Changes that come while an answer is being sent are folded into the
// next recomputation, so a slow watcher costs the router one computation
// per answer, not one per change.
func (s *server) WatchSaturation(r *routerv1.WatchSaturationRequest, stream routerv1.RouterService_WatchSaturationServer) error {
	if len(r.GetModels()) > maxWatchedModels {
		return status.Errorf(codes.InvalidArgument, "at most %d models may be watched", maxWatchedModels)
	}
	ctx := stream.Context()
	type word struct {
		saturated bool
		room      int
	}
	sent := map[string]word{}
	first := true
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		// Taken before the computation: a change during it closes this
		// channel, and the loop computes again.
		changed := s.core.Changed()
		models := r.GetModels()
		if len(models) == 0 {
			models = s.core.Models()
		}
		var out []*routerv1.ModelSaturation
		var soonest time.Duration
		for _, m := range models {
			w := s.core.SaturationNext(m)
			if w.Next > 0 && (soonest == 0 || w.Next < soonest) {
				soonest = w.Next
			}
			now := word{w.Saturated, w.Room}
			if was, ok := sent[m]; first || !ok || was != now {
				sent[m] = now
				out = append(out, &routerv1.ModelSaturation{Model: m, Saturated: w.Saturated, Room: uint32(w.Room), Capacity: uint32(w.Capacity)})
			}
		}
		// A model gone from the registry is no longer saturated.
		for m, was := range sent {
			if !slices.Contains(models, m) {
				delete(sent, m)
				if was.saturated || was.room > 0 {
					out = append(out, &routerv1.ModelSaturation{Model: m})
				}
			}
		}
		if first || len(out) > 0 {
			slices.SortFunc(out, func(a, b *routerv1.ModelSaturation) int { return strings.Compare(a.Model, b.Model) })
			if err := stream.Send(&routerv1.WatchSaturationResponse{Models: out}); err != nil {
				return err
			}
			first = false
		}
		var at <-chan time.Time
		if soonest > 0 {
			timer.Reset(soonest)
			at = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			timer.Stop()
		case <-at:
		}
	}
}
