package transport

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestWorkerPool(t *testing.T) {
	tests := []struct {
		name     string
		waves    int // sequential waves of concurrent tasks
		perWave  int
		wantIdle int // idle goroutines after the last wave
	}{
		{name: "one task reuses one goroutine", waves: 5, perWave: 1, wantIdle: 1},
		{name: "concurrent tasks park for reuse", waves: 3, perWave: 8, wantIdle: 8},
		{name: "idle goroutines are bounded", waves: 1, perWave: maxIdleWorkers + 10, wantIdle: maxIdleWorkers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p workerPool
			var ran atomic.Int64
			for range tc.waves {
				var started, release sync.WaitGroup
				started.Add(tc.perWave)
				release.Add(1)
				var done sync.WaitGroup
				done.Add(tc.perWave)
				for range tc.perWave {
					p.run(func() {
						defer done.Done()
						ran.Add(1)
						started.Done()
						release.Wait() // hold every task so they need distinct goroutines
					})
				}
				started.Wait()
				release.Done()
				done.Wait()
				// A task's goroutine parks after the task returns; wait for it.
				for !p.idleAtLeast(min(tc.perWave, maxIdleWorkers)) {
					runtime.Gosched()
				}
			}
			p.mu.Lock()
			idle := len(p.idle)
			p.mu.Unlock()
			if idle != tc.wantIdle {
				t.Errorf("idle goroutines = %d, want %d", idle, tc.wantIdle)
			}
			if got, want := ran.Load(), int64(tc.waves*tc.perWave); got != want {
				t.Errorf("ran %d tasks, want %d", got, want)
			}
			p.close()
			// After close a task still runs, on a goroutine that then exits.
			var after sync.WaitGroup
			after.Add(1)
			p.run(after.Done)
			after.Wait()
			p.close()
		})
	}
}

func (p *workerPool) idleAtLeast(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle) >= n
}
