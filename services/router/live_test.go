package router_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// TestLiveGroupsStayOnTheirWorker is the case of chats sharing long
// system prompts, on 4 mockers at make run's defaults (real time, router
// weight 1): 5 groups sharing 4,096-token prefixes, sent one at a time,
// then 8 at a time. Every group's requests after its first land on one
// worker: no group moves, so none pays a cold prefill twice.
func TestLiveGroupsStayOnTheirWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := stacktest.StartLive(t, ctx, 4)
	const groups, prefixLen = 5, 4096
	prompt := func(g, i int) []uint32 {
		p := make([]uint32, prefixLen+40)
		for j := range p {
			if j < prefixLen {
				p[j] = uint32(2000 + g*prefixLen + j)
			} else {
				p[j] = uint32(100000 + i*64 + j - prefixLen)
			}
		}
		return p
	}
	var mu sync.Mutex
	where := make([][]uint64, groups)
	n := 0
	send := func(g int) error {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		w, _, err := s.Play(ctx, "r"+strconv.Itoa(k), prompt(g, k), 4)
		mu.Lock()
		where[g] = append(where[g], w)
		mu.Unlock()
		return err
	}
	rounds := 3
	if testing.Short() {
		rounds = 2
	}
	for range rounds {
		for g := range groups {
			if err := send(g); err != nil {
				t.Fatal(err)
			}
		}
	}
	for wave := range rounds * groups * 2 / 8 {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() {
				if err := send((wave*8 + i) % groups); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	for g, ws := range where {
		for _, w := range ws[1:] {
			if w != ws[1] {
				t.Errorf("group %d moved between workers: %x", g, ws)
				break
			}
		}
	}
}
