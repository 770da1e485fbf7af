package transport

import "sync"

// maxIdleWorkers bounds the goroutines a workerPool keeps parked.
const maxIdleWorkers = 256

// workerPool runs functions on reused goroutines. A fresh goroutine starts
// with a small stack and grows it (a copy each time it doubles) as soon as it
// reads a frame and runs a handler; on a request plane that starts a
// goroutine per request, that growth is a measurable part of a short call.
// A pooled goroutine keeps its grown stack, and handing it work costs one
// channel send. Idle goroutines beyond maxIdleWorkers exit.
type workerPool struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
	wg     sync.WaitGroup
}

// run runs f on an idle goroutine, or on a new one if none is idle. After
// close, f still runs, on a goroutine of its own that exits with it.
func (p *workerPool) run(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		c <- f
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.work(f)
}

// work runs f, then whatever run hands it, until the pool has enough idle
// goroutines or is closed.
func (p *workerPool) work(f func()) {
	defer p.wg.Done()
	c := make(chan func(), 1)
	for f != nil {
		f()
		p.mu.Lock()
		if p.closed || len(p.idle) >= maxIdleWorkers {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		f = <-c
	}
}

// close makes idle goroutines exit and waits for every goroutine of the
// pool, busy ones included, to return.
func (p *workerPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c <- nil
	}
	p.wg.Wait()
}
