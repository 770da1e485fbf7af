// Package controlplane runs Switchyard's control plane in process for the
// benchmark commands (frontend-bench, kv-events-bench) and the clients'
// Example tests, which have no testing.TB: an embedded etcd with a
// registry on it and an eventbus with its embedded NATS, under one
// temporary directory, on loopback ports the OS picks. Tests use
// registrytest and eventbustest instead, which tie all of it to a
// testing.TB.
package controlplane

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/services/eventbus"
	"github.com/switchyard-llm/switchyard/services/registry"
)

// ControlPlane is a running registry and eventbus.
type ControlPlane struct {
	Registry *registry.Service
	Eventbus *eventbus.Service

	ctx    context.Context
	cancel context.CancelFunc
	waits  []func() error
	stops  []func()
}

// Start runs the control plane, its files in a new temporary directory
// named from pattern (as os.MkdirTemp), logging to log. On an error
// nothing is left running.
func Start(pattern string, log *slog.Logger) (_ *ControlPlane, err error) {
	c := &ControlPlane{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, err
	}
	c.stops = append(c.stops, func() { os.RemoveAll(dir) })
	etcd, err := registry.StartEmbeddedEtcd(registry.EmbeddedEtcdConfig{Dir: dir + "/etcd", ClientURL: "http://127.0.0.1:0",
		PeerURL: "http://127.0.0.1:0", Fast: true})
	if err != nil {
		return nil, err
	}
	c.stops = append(c.stops, etcd.Close)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	// The services stop on the context, then are waited for, the last
	// started first, before etcd goes.
	c.stops = append(c.stops, func() {
		c.cancel()
		for i := len(c.waits) - 1; i >= 0; i-- {
			_ = c.waits[i]()
		}
	})
	if c.Registry, err = registry.Start(c.ctx, registry.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second},
		Backend: registry.BackendKVStore, EtcdEndpoints: strings.Join(etcd.Endpoints(), ","), EtcdDialTimeout: 5 * time.Second}, log); err != nil {
		return nil, err
	}
	c.waits = append(c.waits, c.Registry.Wait)
	if c.Eventbus, err = eventbus.Start(c.ctx, eventbus.Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second},
		DataDir: dir + "/nats", EmbeddedNATSPort: -1, StreamMaxAge: time.Hour}, log); err != nil {
		return nil, err
	}
	c.waits = append(c.waits, c.Eventbus.Wait)
	return c, nil
}

// Context ends when Close begins: services started on it (a router, a
// frontend, workers) stop with the control plane.
func (c *ControlPlane) Context() context.Context { return c.ctx }

// OnClose has Close wait for wait (a service's Wait, started on Context)
// after Context ends, before the services started earlier stop.
func (c *ControlPlane) OnClose(wait func() error) { c.waits = append(c.waits, wait) }

// RegistryAddr is the registry's gRPC address.
func (c *ControlPlane) RegistryAddr() string { return c.Registry.Addr().String() }

// EventbusAddr is the eventbus's gRPC address.
func (c *ControlPlane) EventbusAddr() string { return c.Eventbus.Addr().String() }

// Close stops everything started on Context, the eventbus, the registry
// and etcd, and removes the directory. It may be called more than once.
func (c *ControlPlane) Close() {
	for i := len(c.stops) - 1; i >= 0; i-- {
		c.stops[i]()
	}
	c.stops = nil
}
