// Package etcdcluster starts etcd clusters of embedded members on loopback
// for tests: members a test can stop and restart on their data, and tell
// which one leads.
package etcdcluster

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/switchyard-llm/switchyard/pkg/testport"
)

// Cluster is an etcd cluster of embedded members on loopback, each of which
// a test can stop and restart on its data (a crash, a partitioned member).
type Cluster struct {
	t       testing.TB
	initial string
	members []*member
	// Endpoints are the members' client URLs.
	Endpoints []string
}

type member struct {
	name, dir, client, peer string
	etcd                    *embed.Etcd
	started                 bool
}

// Start starts an n-member etcd cluster and stops it at cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	var initial []string
	for i := range n {
		// The ports are the test's for its whole life (testport.Shareable):
		// the member listens on them while it runs, and no port another test
		// binds on 127.0.0.1:0 lands on them, before, while it is stopped,
		// or after.
		m := &member{name: fmt.Sprintf("m%d", i), dir: t.TempDir()}
		m.client = "http://" + testport.Shareable(t)
		m.peer = "http://" + testport.Shareable(t)
		c.members = append(c.members, m)
		c.Endpoints = append(c.Endpoints, m.client)
		initial = append(initial, m.name+"="+m.peer)
	}
	c.initial = strings.Join(initial, ",")
	errs := make(chan error, n)
	for i := range c.members {
		go func() { errs <- c.start(i) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("start etcd member: %v", err)
		}
	}
	t.Cleanup(func() {
		for i := range c.members {
			c.Stop(i)
		}
	})
	return c
}

func (c *Cluster) start(i int) error {
	m := c.members[i]
	cu, _ := url.Parse(m.client)
	pu, _ := url.Parse(m.peer)
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.name, m.dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.InitialClusterToken = c.initial, "switchyard-test"
	cfg.ClusterState = embed.ClusterStateFlagNew
	if m.started {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.TickMs, cfg.ElectionMs, cfg.UnsafeNoFsync = 10, 100, true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	var err error
	for range 50 { // a stopped member's ports may take a moment to free
		m.etcd, err = embed.StartEtcd(cfg)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	select {
	case <-m.etcd.Server.ReadyNotify():
	case err := <-m.etcd.Err():
		return err
	case <-time.After(60 * time.Second):
		return fmt.Errorf("etcd member %s not ready within 60s", m.name)
	}
	m.started = true
	return nil
}

// Leader is the index of the member that leads, or -1 while none does.
func (c *Cluster) Leader() int {
	for i, m := range c.members {
		if m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Stop stops member i (as a crash would; its data stays for Start). Its
// ports stay the test's meanwhile (connections are refused).
func (c *Cluster) Stop(i int) {
	m := c.members[i]
	if m.etcd == nil {
		return
	}
	m.etcd.Close()
	m.etcd = nil
}

// Start restarts a stopped member i on its data.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatalf("restart etcd member %d: %v", i, err)
	}
}

// KnownGoroutines are goleak options for the goroutines a cluster's members
// leave behind: the HTTP connections between members (raft's peer
// transport) stay open in their keep-alive until the process ends, with no
// handle a test could close.
func KnownGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	}
}
