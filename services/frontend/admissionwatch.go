package frontend

import (
	"context"
	"net/http"
	"sync"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/backoff"
	"github.com/switchyard-llm/switchyard/services/router/core"
)

// defaultOutputTokens is what a request without max_tokens is weighed at
// in its tenant's load: its prompt is known, its output is not.
const defaultOutputTokens = 256

// startAdmission starts admission control: the queue, its watch of the
// router's saturation, and its exchange with the other replicas.
func (s *Service) startAdmission() {
	s.admission = newAdmission(s.cfg.Admission, newAdmissionMetrics(s.metrics.registry))
	if s.cfg.Admission.Off {
		s.admissionWait = func() {}
		return
	}
	s.routing.decided = s.admission.decidedRoom
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if s.routing.client != nil {
			s.watchRouter(ctx, s.routing.remotes[0])
		} else {
			watchCore(ctx, s.routing.local, s.admission)
		}
	})
	peers := startPeers(ctx, s.admission, s.bus, s.cfg.Namespace, s.log)
	s.admissionWait = func() {
		cancel()
		wg.Wait()
		peers()
	}
}

// stopAdmission stops admission control's goroutines.
func (s *Service) stopAdmission() {
	if s.admissionWait != nil {
		s.admissionWait()
	}
}

// admit holds a request in the admission queue while its model's fleet is
// saturated (see admission.go).
func (s *Service) admit(r *http.Request, p genParams, promptTokens, n int) (*ticket, error) {
	prio, tenant, err := admissionOf(r.Header, apiKeyOf(r.Context()))
	if err != nil {
		return nil, err
	}
	out := uint64(p.maxTokens)
	if out == 0 {
		out = defaultOutputTokens
	}
	tokens := uint64(n) * (uint64(promptTokens) + out)
	// What a queued request holds: its body (read, decoded) and prompt.
	bytes := max(r.ContentLength, 0) + int64(4*promptTokens)
	return s.admission.admit(r.Context(), p.model, tenant, prio, tokens, bytes)
}

// watchRouter follows the router's WatchSaturation until ctx ends,
// reopening it after failures. While it is broken no model is taken for
// saturated by it: the frontend routes in process then, and the route
// decisions say what they say.
func (s *Service) watchRouter(ctx context.Context, rc routerv1.RouterServiceClient) {
	bo := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
	for ctx.Err() == nil {
		stream, err := rc.WatchSaturation(ctx, &routerv1.WatchSaturationRequest{})
		if err == nil {
			for {
				var resp *routerv1.WatchSaturationResponse
				if resp, err = stream.Recv(); err != nil {
					break
				}
				bo.Reset()
				for _, m := range resp.GetModels() {
					s.admission.watchedFleet(m.GetModel(), m.GetSaturated(), m.GetRoom(), m.GetCapacity())
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.admission.unsaturateAll()
		s.log.Debug("saturation watch broken", "err", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(bo.Next()):
		}
	}
}

// watchCore follows an in-process core's saturation until ctx ends: the
// frontend's own router (the modes other than kv, or --no-kv-events). As
// the router's WatchSaturation, it recomputes at every change of the
// core's load record and when time alone makes room
// (core.SaturationNext).
func watchCore(ctx context.Context, c *core.Core, a *admission) {
	type word struct {
		saturated bool
		room      int
	}
	last := map[string]word{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		changed := c.Changed()
		var soonest time.Duration
		for _, m := range c.Models() {
			w := c.SaturationNext(m)
			if w.Next > 0 && (soonest == 0 || w.Next < soonest) {
				soonest = w.Next
			}
			if was, ok := last[m]; !ok || was != (word{w.Saturated, w.Room}) {
				last[m] = word{w.Saturated, w.Room}
				a.watchedFleet(m, w.Saturated, uint32(w.Room), uint32(w.Capacity))
			}
		}
		var at <-chan time.Time
		if soonest > 0 {
			timer.Reset(soonest)
			at = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			timer.Stop()
		case <-at:
		}
	}
}

// unsaturateAll takes every model for not saturated (the router's watch is
// broken): the queues drain through route decisions.
func (a *admission) unsaturateAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, mq := range a.models {
		a.setSaturatedLocked(mq, false, 0)
		a.pumpLocked(mq)
	}
}
