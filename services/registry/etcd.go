package registry

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EmbeddedEtcd is a single-node etcd run inside the registry process: the
// laptop default when ETCD_ENDPOINTS is empty, and the etcd of the tests.
type EmbeddedEtcd struct {
	etcd *embed.Etcd
}

// EmbeddedEtcdConfig says where an embedded etcd keeps its data and listens.
type EmbeddedEtcdConfig struct {
	// Dir holds the member's data; a restart on the same Dir keeps every key
	// and lease.
	Dir string
	// ClientURL and PeerURL are the listen URLs, such as
	// http://127.0.0.1:2379; port 0 picks a free port.
	ClientURL, PeerURL string
	// Fast trades durability for speed (no fsync, short election ticks): for
	// tests and throwaway laptop stacks.
	Fast bool
	// Logger receives etcd's own logs; nil discards them.
	Logger *zap.Logger
}

// StartEmbeddedEtcd starts a single-node etcd and waits until it serves.
func StartEmbeddedEtcd(c EmbeddedEtcdConfig) (*EmbeddedEtcd, error) {
	curl, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd client URL: %w", err)
	}
	purl, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd peer URL: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "switchyard"
	cfg.Dir = c.Dir
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if c.Fast {
		cfg.TickMs = 10
		cfg.ElectionMs = 100
		cfg.UnsafeNoFsync = true
	}
	logger := c.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("embedded etcd did not become ready within 60s")
	}
	return &EmbeddedEtcd{etcd: e}, nil
}

// Endpoints are the client URLs, with the ports actually bound.
func (e *EmbeddedEtcd) Endpoints() []string {
	var eps []string
	for _, l := range e.etcd.Clients {
		eps = append(eps, "http://"+l.Addr().String())
	}
	return eps
}

// Close stops etcd and waits for it.
func (e *EmbeddedEtcd) Close() { e.etcd.Close() }
