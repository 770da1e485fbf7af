package eventbustest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/services/eventbus"
)

// NATSCluster is a JetStream cluster of nats-server processes on loopback,
// for tests that kill a member (SIGKILL: a crash, not a shutdown) and bring
// it back. The binary is built from the nats-server module this module
// requires, so the servers are the same code as the embedded one.
//
// Members are processes rather than embedded servers because an embedded
// server can only be shut down gracefully, and a graceful shutdown first
// hands the leadership of every Raft group it leads to a follower: a test
// that "kills the stream leader" that way never sees a leader vanish.
//
// What a JetStream cluster needs, and what one is easily started without (a
// cluster that then never acknowledges a publish to a replicated stream): a
// cluster name shared by all members, a distinct server name per member (the
// Raft peer id is derived from it; the eventbus's embedded server has a fixed
// one), a distinct store dir per member, routes to every member, and a meta
// leader known to every member before the first stream with replicas is
// created, since the meta group places the stream's peers. The ports are
// chosen up front so that every member's routes name all of them and a
// restarted member comes back on the same ones.
type NATSCluster struct {
	t   testing.TB
	bin string

	members []*natsMember
}

type natsMember struct {
	name                                 string
	clientPort, clusterPort, monitorPort int
	storeDir                             string
	mu                                   sync.Mutex
	cmd                                  *exec.Cmd // nil while stopped
	exited                               chan struct{}
}

// ClusterName is the NATS cluster name StartNATSCluster gives its members.
const ClusterName = "switchyard-test"

// StartNATSCluster builds nats-server, starts n members that form one
// JetStream cluster, and waits until every member is healthy and follows a
// meta leader that knows all n. Every member is killed in t.Cleanup.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{t: t, bin: buildNATSServer(t)}
	// Held for the test (testport.ShareablePorts): each member binds its
	// own, and a member killed and started again finds them still free.
	ports := testport.ShareablePorts(t, 3*n)
	for i := range n {
		c.members = append(c.members, &natsMember{
			name:       fmt.Sprintf("n%d", i+1),
			clientPort: ports[3*i], clusterPort: ports[3*i+1], monitorPort: ports[3*i+2],
			storeDir: t.TempDir(),
		})
	}
	t.Cleanup(func() {
		for i := range c.members {
			c.Kill(i)
		}
	})
	for i := range c.members {
		c.Start(i)
	}
	c.WaitHealthy(time.Minute)
	return c
}

// buildNATSServer builds the nats-server command of the required module into
// a temporary dir (from the build cache after the first time).
func buildNATSServer(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("a NATS cluster test builds nats-server and needs the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	return bin
}

// Start starts member i (again, on its ports and store) and waits until it
// accepts connections. Starting a running member does nothing.
func (c *NATSCluster) Start(i int) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return
	}
	routes := make([]string, len(c.members))
	for j, o := range c.members {
		routes[j] = fmt.Sprintf("nats://127.0.0.1:%d", o.clusterPort)
	}
	cmd := exec.Command(c.bin,
		"--server_name", m.name, "-a", "127.0.0.1", "-p", strconv.Itoa(m.clientPort),
		"-m", strconv.Itoa(m.monitorPort), "-js", "-sd", m.storeDir,
		"--cluster_name", ClusterName, "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", m.clusterPort),
		"--routes", strings.Join(routes, ","))
	if os.Getenv("SWITCHYARD_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start nats-server %s: %v", m.name, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(m.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", m.clientPort), time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-m.exited:
			m.cmd = nil
			c.t.Fatalf("nats-server %s exited at start (port taken?)", m.name)
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nats-server %s not accepting connections after 30s: %v", m.name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends member i SIGKILL and waits until it is gone; killing a stopped
// member does nothing.
func (c *NATSCluster) Kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
}

// Len is the number of members.
func (c *NATSCluster) Len() int { return len(c.members) }

// Name is member i's server name (n1, n2, ...).
func (c *NATSCluster) Name(i int) string { return c.members[i].name }

// URLs is the client URL of every member, comma-separated, as an eventbus's
// --nats-server takes them.
func (c *NATSCluster) URLs() string {
	urls := make([]string, len(c.members))
	for i, m := range c.members {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", m.clientPort)
	}
	return strings.Join(urls, ",")
}

func (c *NATSCluster) running(i int) bool {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// healthy reports whether running member i answers /healthz with ok (its
// JetStream is current with the meta leader and with every stream it holds)
// and knows a meta leader of a group of every member.
func (c *NATSCluster) healthy(i int) error {
	m := c.members[i]
	get := func(path string, v any) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", m.monitorPort, path), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
		}
		return json.NewDecoder(resp.Body).Decode(v)
	}
	var hz natsserver.HealthStatus
	if err := get("/healthz", &hz); err != nil {
		return err
	}
	var jsz natsserver.JSInfo
	if err := get("/jsz", &jsz); err != nil {
		return err
	}
	if jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size != c.Len() {
		return fmt.Errorf("meta group %+v, want a leader and %d peers", jsz.Meta, c.Len())
	}
	return nil
}

// WaitHealthy waits until every running member is healthy (see healthy),
// so that a stream with replicas can be placed and every replica is caught
// up. It fails t after timeout.
func (c *NATSCluster) WaitHealthy(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var errs []error
		for i, m := range c.members {
			if !c.running(i) {
				continue
			}
			if err := c.healthy(i); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			}
		}
		if len(errs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("NATS cluster not healthy after %s: %v", timeout, errors.Join(errs...))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StreamLeader returns the index of the running member that leads the
// namespace's event stream, asking the cluster (through any member) with a JetStream
// client, and fails t when none does within timeout.
func (c *NATSCluster) StreamLeader(namespace string, timeout time.Duration) int {
	c.t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.Timeout(time.Second))
	if err != nil {
		c.t.Fatalf("connect to the NATS cluster: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := js.Stream(ctx, eventbus.StreamName(namespace))
		cancel()
		if err == nil && st.CachedInfo().Cluster != nil {
			for i, m := range c.members {
				if st.CachedInfo().Cluster.Leader == m.name && c.running(i) {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("stream %s has no leader after %s (last: %v)", eventbus.StreamName(namespace), timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
