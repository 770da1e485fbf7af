package transport

import (
	"context"
	"errors"
	"sync"
)

// multiServer serves the same endpoints on several planes
// (DYN_REQUEST_PLANE=tcp,http): one server per plane, each with every
// handler. A worker registers all their addresses, so each client calls it
// on a plane it speaks, and a fleet can move from one plane to another
// without a flag day.
type multiServer struct {
	servers []Server // in the order of Config.ServedPlanes
}

// Handle implements [Server]: h serves endpoint on every plane.
func (m *multiServer) Handle(endpoint string, h Handler) {
	for _, s := range m.servers {
		s.Handle(endpoint, h)
	}
}

// Start implements [Server]: it starts every plane, and when one fails
// closes those already started and returns its error.
func (m *multiServer) Start(ctx context.Context) error {
	for i, s := range m.servers {
		if err := s.Start(ctx); err != nil {
			for _, started := range m.servers[:i] {
				_ = started.Close()
			}
			return err
		}
	}
	return nil
}

// Address implements [Server]: the first plane's address.
func (m *multiServer) Address(endpoint string) Address { return m.servers[0].Address(endpoint) }

// Addresses implements [Server]: one address per plane, in order.
func (m *multiServer) Addresses(endpoint string) []Address {
	out := make([]Address, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.Addresses(endpoint)...)
	}
	return out
}

// Drain implements [Server]: every plane drains at once, within ctx; it
// returns the first error.
func (m *multiServer) Drain(ctx context.Context) error {
	errs := make([]error, len(m.servers))
	var wg sync.WaitGroup
	for i, s := range m.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Drain(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close implements [Server]: it closes every plane.
func (m *multiServer) Close() error {
	var errs []error
	for _, s := range m.servers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
