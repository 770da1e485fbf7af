package partition_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// needs skips the test when what it needs is missing, and fails it under
// CI=true (.ci/run runs as root with iproute2 and nftables).
func needs(t *testing.T, why string) {
	t.Helper()
	msg := "needs " + why
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// lab is a bridge and the namespaces joined to it. Names carry a per-lab id
// (bridge syb<id>, namespaces sy<id>-<name>, host-side veths sy<id>v<n>), so
// labs at once do not collide; addresses are 10.252.<x>.<n>/24 with x drawn
// per lab among the subnets no address of this machine is in (pickSubnet),
// the bridge (this process's side) at .254.
type lab struct {
	t      *testing.T
	id     string
	bridge string
	subnet string // "10.252.x."
	dir    string

	mu    sync.Mutex
	hosts []*host
	cuts  map[[2]string]bool
}

// host is one namespace with one address.
type host struct {
	name, ns, addr string
}

func run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// newLab makes the bridge; t's cleanup removes it and every namespace.
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		needs(t, "root for network namespaces")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			needs(t, tool+" (apt-get install iproute2 nftables)")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := &lab{t: t, cuts: map[[2]string]bool{}, dir: t.TempDir()}
	// Held until after close has removed the bridge (cleanups run last
	// registered first).
	x, err := pickSubnet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseSubnet(x) })
	l.subnet = fmt.Sprintf("10.252.%d.", x)
	for attempt := 0; ; attempt++ {
		l.id = fmt.Sprintf("%04x", rand.IntN(1<<16))
		l.bridge = "syb" + l.id
		if err := run(ctx, "ip", "link", "add", l.bridge, "type", "bridge"); err == nil {
			break
		} else if attempt == 5 {
			t.Fatal(err)
		}
	}
	t.Cleanup(l.close)
	for _, args := range [][]string{
		{"ip", "addr", "add", l.subnet + "254/24", "dev", l.bridge},
		{"ip", "link", "set", l.bridge, "up"},
	} {
		if err := run(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// subnets are the x of the 10.252.<x>.0/24 subnets this process's labs hold.
var subnets struct {
	sync.Mutex
	held map[int]bool
}

// pickSubnet draws an x for a lab's 10.252.<x>.0/24: none of this process's
// labs holds it and no address of this machine (another process's lab) is in
// it. Two bridges with one subnet would make the host's routes to the
// namespaces ambiguous, which is what lets the tests run in parallel.
func pickSubnet(ctx context.Context) (int, error) {
	out, err := exec.CommandContext(ctx, "ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("ip -o -4 addr show: %w", err)
	}
	subnets.Lock()
	defer subnets.Unlock()
	if subnets.held == nil {
		subnets.held = map[int]bool{}
	}
	for range 1000 {
		x := rand.IntN(250)
		if subnets.held[x] || bytes.Contains(out, fmt.Appendf(nil, " 10.252.%d.", x)) {
			continue
		}
		subnets.held[x] = true
		return x, nil
	}
	return 0, fmt.Errorf("no free 10.252.x.0/24 subnet:\n%s", out)
}

func releaseSubnet(x int) {
	subnets.Lock()
	defer subnets.Unlock()
	delete(subnets.held, x)
}

// close removes the namespaces (their veths go with them) and the bridge.
func (l *lab) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hosts {
		if err := run(ctx, "ip", "netns", "del", h.ns); err != nil {
			l.t.Errorf("cleanup: %v", err)
		}
	}
	if err := run(ctx, "ip", "link", "del", l.bridge); err != nil {
		l.t.Errorf("cleanup: %v", err)
	}
}

// host makes a namespace named name on the bridge with the next address.
func (l *lab) host(name string) *host {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l.mu.Lock()
	n := len(l.hosts) + 1
	h := &host{name: name, ns: "sy" + l.id + "-" + name, addr: fmt.Sprintf("%s%d", l.subnet, n)}
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	veth := fmt.Sprintf("sy%sv%d", l.id, n)
	for _, args := range [][]string{
		{"ip", "netns", "add", h.ns},
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"ip", "link", "set", veth, "master", l.bridge, "up"},
		{"ip", "-n", h.ns, "addr", "add", h.addr + "/24", "dev", "eth0"},
		{"ip", "-n", h.ns, "link", "set", "eth0", "up"},
		{"ip", "-n", h.ns, "link", "set", "lo", "up"},
	} {
		if err := run(ctx, args...); err != nil {
			l.t.Fatal(err)
		}
	}
	return h
}

// hostNamed is the host made with name; it fails the test when there is
// none.
func (l *lab) hostNamed(name string) *host {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hosts {
		if h.name == name {
			return h
		}
	}
	l.t.Fatalf("no host %s in the lab", name)
	return nil
}

// cut drops every packet between a and b, both ways, until heal.
func (l *lab) cut(a, b *host) { l.setCut(a, b, true) }

// heal undoes cut.
func (l *lab) heal(a, b *host) { l.setCut(a, b, false) }

func (l *lab) setCut(a, b *host, on bool) {
	l.t.Helper()
	l.mu.Lock()
	if on {
		l.cuts[[2]string{a.name, b.name}], l.cuts[[2]string{b.name, a.name}] = true, true
	} else {
		delete(l.cuts, [2]string{a.name, b.name})
		delete(l.cuts, [2]string{b.name, a.name})
	}
	l.mu.Unlock()
	for _, h := range []*host{a, b} {
		if err := l.applyCuts(h); err != nil {
			l.t.Fatal(err)
		}
	}
}

// applyCuts writes h's nftables table "sycut": a drop rule, in and out, for
// each address h is cut from (an empty table when none).
func (l *lab) applyCuts(h *host) error {
	l.mu.Lock()
	var peers []string
	for _, o := range l.hosts {
		if l.cuts[[2]string{h.name, o.name}] {
			peers = append(peers, o.addr)
		}
	}
	l.mu.Unlock()
	slices.Sort(peers)
	var rules strings.Builder
	fmt.Fprintf(&rules, "table inet sycut\ndelete table inet sycut\ntable inet sycut {\n")
	fmt.Fprintf(&rules, "  chain in { type filter hook input priority 0; policy accept;\n")
	for _, p := range peers {
		fmt.Fprintf(&rules, "    ip saddr %s drop\n", p)
	}
	fmt.Fprintf(&rules, "  }\n  chain out { type filter hook output priority 0; policy accept;\n")
	for _, p := range peers {
		fmt.Fprintf(&rules, "    ip daddr %s drop\n", p)
	}
	fmt.Fprintf(&rules, "  }\n}\n")
	f := filepath.Join(l.dir, "nft-"+h.name)
	if err := os.WriteFile(f, []byte(rules.String()), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return run(ctx, "ip", "netns", "exec", h.ns, "nft", "-f", f)
}

// proc is a process running in a namespace.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	log    string
}

// start runs bin with args in h's namespace; t's cleanup stops it
// (SIGTERM, then SIGKILL after 10 s) and prints its log's tail on failure.
func (l *lab) start(h *host, name, bin string, args ...string) *proc {
	l.t.Helper()
	p := &proc{name: name, exited: make(chan struct{}), log: filepath.Join(l.dir, name+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		l.t.Fatal(err)
	}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", h.ns, bin}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	l.t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		if l.t.Failed() {
			if b, err := os.ReadFile(p.log); err == nil {
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				l.t.Logf("%s log:\n%s", name, b)
			}
		}
	})
	return p
}

// running tells whether p has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}
