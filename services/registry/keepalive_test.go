package registry

import (
	"context"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
)

// open reports whether the keepaliver holds a stream.
func (k *keepaliver) open() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stream != nil
}

// TestKeepAliveStreamReopensWithoutARefresh restarts etcd under a registry
// store and checks that its shared keep-alive stream is open again before
// any lease is refreshed: a stream opened only by the next refresh could
// meet an etcd that had begun a graceful stop, which refuses new streams
// while it keeps expiring leases. For a stream that broke and one that
// never opened (etcd away when the store started), the keepaliver opens a
// stream by itself once etcd is back, and the lease it refreshes then is
// etcd's, with its TTL.
func TestKeepAliveStreamReopensWithoutARefresh(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// startAway starts the store while etcd is stopped.
		startAway bool
	}{
		{name: "a stream that broke"},
		{name: "etcd away when the store started", startAway: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := EmbeddedEtcdConfig{Dir: t.TempDir(), ClientURL: "http://" + testport.Shareable(t), PeerURL: "http://" + testport.Shareable(t), Fast: true}
			start := func() *EmbeddedEtcd {
				t.Helper()
				var e *EmbeddedEtcd
				var err error
				for range 50 { // the stopped etcd's ports may take a moment to free
					if e, err = StartEmbeddedEtcd(cfg); err == nil {
						return e
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Fatal(err)
				return nil
			}
			e := start()
			cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lease, err := cli.Grant(ctx, 60)
			if err != nil {
				t.Fatal(err)
			}

			var k *keepaliver
			if tc.startAway {
				e.Close()
				k = newKeepaliver(cli, slog.New(slog.DiscardHandler))
			} else {
				k = newKeepaliver(cli, slog.New(slog.DiscardHandler))
				testwait.Until(t, 30*time.Second, "the first stream to open", k.open)
				if _, found, err := k.once(ctx, uint64(lease.ID)); err != nil || !found {
					t.Fatalf("refresh with etcd up: found %v, err %v", found, err)
				}
				e.Close()
				testwait.Until(t, 30*time.Second, "the stream to break with etcd stopped", func() bool { return !k.open() })
			}
			defer k.close()

			e = start()
			defer e.Close()
			testwait.Until(t, 30*time.Second, "a stream to open without a refresh", k.open)
			ttl, found, err := k.once(ctx, uint64(lease.ID))
			if err != nil || !found || ttl <= 0 {
				t.Fatalf("refresh after etcd's return: ttl %v, found %v, err %v", ttl, found, err)
			}
		})
	}
}
