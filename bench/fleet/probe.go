package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
)

// client is how the bench talks to the frontends and the router, as a user
// and as `switchyard route` would.
type client struct {
	http      *http.Client
	frontends []string
	model     string
	router    routerv1.RouterServiceClient
}

// complete sends a one-token completion of prompt to frontend i and reports
// whether it succeeded and the time to its first byte of body.
func (c *client) complete(ctx context.Context, i int, prompt []uint32, stream bool) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"model": c.model, "prompt": prompt, "max_tokens": 1, "stream": stream})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.frontends[i]+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var one [1]byte
	_, rerr := io.ReadFull(res.Body, one[:])
	ttfb := time.Since(start)
	rest, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("frontend %d: HTTP %d: %s%s", i, res.StatusCode, one[:], rest)
	}
	if rerr != nil {
		return 0, rerr
	}
	return ttfb, nil
}

// instances is what frontend i's /health says: how many worker instances
// serve a model in its view.
func (c *client) instances(ctx context.Context, i int) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.frontends[i]+"/health", nil)
	res, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var h struct {
		Instances int `json:"instances"`
	}
	if err := json.NewDecoder(res.Body).Decode(&h); err != nil {
		return 0, err
	}
	return h.Instances, nil
}

// waitInstances polls every frontend until each sees want instances and
// returns how long the slowest took, or an error after timeout.
func (c *client) waitInstances(ctx context.Context, want int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	var mu sync.Mutex
	var slowest time.Duration
	var errs []error
	var wg sync.WaitGroup
	for i := range c.frontends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got int
			var err error
			for {
				got, err = c.instances(ctx, i)
				if err == nil && got == want {
					mu.Lock()
					slowest = max(slowest, time.Since(start))
					mu.Unlock()
					return
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("frontend %d sees %d instances after %s, want %d (%v)", i+1, got, timeout, want, err))
					mu.Unlock()
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return slowest, errors.Join(errs...)
}

// untilRouted sends requests for the worker's signatures (a fresh one each
// time, so that the router's prediction of where an earlier one went plays
// no part) through every frontend until each has routed one to the worker
// (to: true) or away from it (to: false), and returns how long the slowest
// frontend took. next numbers the signatures used so far.
func (c *client) untilRouted(ctx context.Context, s *Sim, to bool, next *int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	var slowest time.Duration
	for i := range c.frontends {
		for {
			before := s.Served()
			_, err := c.complete(ctx, i, s.Prompt(*next%Signatures), false)
			*next++
			hit := err == nil && s.Served() > before
			if err == nil && hit == to {
				slowest = max(slowest, time.Since(start))
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return 0, fmt.Errorf("frontend %d: worker %x not %s after %s (last error: %v)", i+1, s.InstanceID(), map[bool]string{true: "routed to", false: "routed away from"}[to], timeout, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return slowest, nil
}

// Signatures is how many signature sequences a probe worker stores, bounding
// the requests one routability measurement can send without reusing one.
const Signatures = 256

// indexed publishes a batch storing a new block for s and polls the router
// until it reports the block cached on s; it returns the time from the
// publish call to then.
func (c *client) indexed(ctx context.Context, s *Sim, hash uint64, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := s.PublishStored(ctx, hash); err != nil {
		return 0, err
	}
	deadline := start.Add(timeout)
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := c.router.QueryOverlaps(qctx, &routerv1.QueryOverlapsRequest{Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: c.model}}, BlockHashes: []uint64{hash}})
		cancel()
		if err == nil {
			for _, cand := range r.Candidates {
				if cand.InstanceId == s.InstanceID() && cand.OverlapBlocks > 0 {
					return time.Since(start), nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("block %x of worker %x not indexed after %s (%v)", hash, s.InstanceID(), timeout, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// dropped polls the router until it no longer answers block as cached on
// instance id (it dropped the worker with its blocks), or fails after
// timeout.
func (c *client) dropped(ctx context.Context, id, block uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := c.router.QueryOverlaps(qctx, &routerv1.QueryOverlapsRequest{Target: &routerv1.Target{Kind: &routerv1.Target_Model{Model: c.model}}, BlockHashes: []uint64{block}})
		cancel()
		if err == nil && !slices.ContainsFunc(r.Candidates, func(cand *routerv1.Candidate) bool { return cand.InstanceId == id && cand.OverlapBlocks > 0 }) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("router still has worker %x's block %x after %s (%v)", id, block, timeout, err)
		}
		time.Sleep(time.Millisecond)
	}
}
