package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// multiClient calls each address with the plane that address names: one
// fleet may mix tcp, http and nats workers, and the registry records which
// each serves. The per-plane clients are made on first use, so a frontend
// that only ever meets tcp workers never connects to NATS.
type multiClient struct {
	cfg Config
	o   options

	mu      sync.Mutex
	clients map[Plane]Client
	closed  bool
}

// newMultiClient returns a client for every plane. The plane of cfg is made
// at once (for nats, that connects, so a bad NATS_SERVER fails at startup as
// it always has); the others when an address first needs them.
func newMultiClient(cfg Config, o options) (*multiClient, error) {
	c := &multiClient{cfg: cfg, o: o, clients: map[Plane]Client{}}
	if _, err := c.client(cfg.Plane); err != nil {
		return nil, err
	}
	return c, nil
}

// client returns the plane's client, making it on first use.
func (c *multiClient) client(p Plane) (Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cl, ok := c.clients[p]; ok {
		return cl, nil
	}
	spec, ok := planeOf(p)
	if !ok {
		return nil, fmt.Errorf("transport: cannot call an address of kind %q (valid: %s)", p, validPlanes)
	}
	// Connecting (nats) holds the lock: concurrent first calls to the
	// plane's addresses wait for one connection instead of racing to make
	// several.
	cl, err := spec.newClient(c.cfg, c.o)
	if err != nil {
		return nil, err
	}
	c.clients[p] = cl
	return cl, nil
}

// Call implements [Client]: it calls addr with the client of addr.Kind.
func (c *multiClient) Call(ctx context.Context, addr Address, endpoint string, headers Headers, payload []byte) (Stream, error) {
	cl, err := c.client(addr.Kind)
	if err != nil {
		return nil, err
	}
	return cl.Call(ctx, addr, endpoint, headers, payload)
}

// Close implements [Client]: it closes every plane's client made so far.
func (c *multiClient) Close() error {
	c.mu.Lock()
	clients := c.clients
	c.clients, c.closed = nil, true
	c.mu.Unlock()
	var errs []error
	for _, cl := range clients {
		if err := cl.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
