package planner

import (
	"encoding/json"
	"net/http"

	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// Status is what /status.json answers: the policy and the last decisions.
type Status struct {
	Connector  string          `json:"connector"`
	Objectives core.Objectives `json:"objectives"`
	// Waiting says why the planner made no decision at the last interval
	// (the virtual connector's acknowledgement); empty otherwise.
	Waiting string `json:"waiting,omitempty"`
	// Decisions are the last ones, newest first.
	Decisions []core.Decision `json:"decisions"`
	// RestoredSamples counts the pools' observed rates the planner took
	// back, when it started, from the last decisions in the registry
	// (core.Planner.Restore); 0 when it learnt them afresh.
	RestoredSamples int `json:"restored_samples,omitempty"`
}

// Status is what /status.json answers.
func (s *Service) Status() Status {
	ds := s.Decisions()
	for i, j := 0, len(ds)-1; i < j; i, j = i+1, j-1 {
		ds[i], ds[j] = ds[j], ds[i]
	}
	s.mu.Lock()
	waiting := s.waiting
	s.mu.Unlock()
	return Status{Connector: s.cfg.Connector, Objectives: core.Objectives{TTFTMs: s.cfg.TTFTSLO, ITLMs: s.cfg.ITLSLO}, Waiting: waiting, Decisions: ds,
		RestoredSamples: s.restored}
}

func (s *Service) statusHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Status())
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	return mux
}
