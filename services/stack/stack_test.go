package stack

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/testport"
)

// listenFlags are the flags and variables through which a component is told
// where to listen.
var listenFlags = map[string]bool{
	"--grpc-addr": true, "--metrics-addr": true, "--http-addr": true,
	"--embedded-etcd-client-url": true, "--embedded-etcd-peer-url": true,
}

// TestPlanListensOnLoopback checks every address the stack hands its
// components: listen flags, the request plane's host variables, and the
// addresses clients dial.
func TestPlanListensOnLoopback(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "frontend"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	c := Config{BinDir: dir, DataDir: dir, HTTPPort: 8000, Mockers: 2, RouterMode: "kv", Host: "127.0.0.1"}
	plan := c.plan()
	if len(plan) != 6 {
		t.Fatalf("plan has %d components, want registry, eventbus, router, 2 mockers, frontend", len(plan))
	}
	seen := map[string]bool{}
	for _, comp := range plan {
		for i, a := range comp.args {
			if !listenFlags[a] {
				continue
			}
			seen[a] = true
			v := strings.TrimPrefix(comp.args[i+1], "http://")
			host, _, err := net.SplitHostPort(v)
			if err != nil || host != "127.0.0.1" {
				t.Errorf("%s %s %s: not on 127.0.0.1", comp.name, a, comp.args[i+1])
			}
		}
		for _, e := range comp.env {
			k, v, _ := strings.Cut(e, "=")
			if k == "DYN_TCP_RPC_HOST" || k == "DYN_HTTP_RPC_HOST" {
				seen[k] = true
				if v != "127.0.0.1" {
					t.Errorf("%s %s: not 127.0.0.1", comp.name, e)
				}
			}
		}
	}
	for _, want := range []string{"--grpc-addr", "--metrics-addr", "--http-addr", "--embedded-etcd-client-url", "--embedded-etcd-peer-url", "DYN_TCP_RPC_HOST", "DYN_HTTP_RPC_HOST"} {
		if !seen[want] {
			t.Errorf("no component is given %s", want)
		}
	}
}

// TestStackListeners runs the real stack from freshly built binaries on free
// ports and reads the kernel's table of listening sockets (what `ss -ltn`
// shows) for every component's process: each one must be on 127.0.0.1.
func TestStackListeners(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every service binary; runs in make test-long")
	}
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("needs /proc/net/tcp")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/",
		"github.com/switchyard-llm/switchyard/services/registry/cmd/registry",
		"github.com/switchyard-llm/switchyard/services/eventbus/cmd/eventbus",
		"github.com/switchyard-llm/switchyard/services/router/cmd/router",
		"github.com/switchyard-llm/switchyard/services/mocker/cmd/mocker",
		"github.com/switchyard-llm/switchyard/services/frontend/cmd/frontend")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Held for the test (testport.ShareablePorts): the children bind them.
	ports := testport.ShareablePorts(t, 10)
	c := Config{BinDir: bin, DataDir: t.TempDir(), HTTPPort: ports[9], Mockers: 1, RouterMode: "kv", Speedup: 0,
		Host: "127.0.0.1", Wait: 60 * time.Second, StopTimeout: 15 * time.Second,
		Ports: Ports{Registry: ports[0], Eventbus: ports[1], Router: ports[2], RegistryMetrics: ports[3], EventbusMetrics: ports[4],
			RouterMetrics: ports[5], EtcdClient: ports[6], EtcdPeer: ports[7], NATS: ports[8]}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, pw); pw.Close() }()
	up, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			t.Log(sc.Text())
			if strings.HasPrefix(sc.Text(), "Switchyard is up") {
				close(up)
			}
		}
	}()
	select {
	case <-up:
	case err := <-done:
		<-read
		t.Fatalf("stack ended before it was up: %v", err)
	}
	listeners := listening(t, children(t))
	cancel()
	if err := <-done; err != nil {
		t.Errorf("stack: %v", err)
	}
	<-read
	if len(listeners) < 10 {
		t.Errorf("found %d listeners, want at least 10 (3 gRPC, 3 metrics, etcd client and peer, NATS, frontend, worker)", len(listeners))
	}
	for _, l := range listeners {
		if !strings.HasPrefix(l, "127.0.0.1:") {
			t.Errorf("a component listens on %s", l)
		}
	}
	t.Logf("listeners: %v", listeners)
}

// children are the pids whose parent is this process.
func children(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces; fields after
		// the last ')' are state, ppid, ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// listening returns the local addresses of the TCP sockets in LISTEN state
// that the processes hold, from /proc/net/tcp and tcp6.
func listening(t *testing.T, pids []int) []string {
	t.Helper()
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
			}
		}
	}
	var out []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			out = append(out, decodeAddr(t, f[1]))
		}
	}
	return out
}

// decodeAddr turns /proc/net/tcp's "0100007F:1F40" into "127.0.0.1:8000".
func decodeAddr(t *testing.T, s string) string {
	hexIP, hexPort, _ := strings.Cut(s, ":")
	raw, err := hex.DecodeString(hexIP)
	if err != nil {
		t.Fatalf("bad address %q", s)
	}
	// The kernel prints each 32-bit word in host (little-endian) order.
	ip := make(net.IP, len(raw))
	for i := 0; i+4 <= len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, _ := strconv.ParseUint(hexPort, 16, 16)
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

// TestRunRefusesPortsInUse holds one of the stack's listen ports, as a first
// `make run` does, and starts a second stack on it: Run must fail before it
// starts any component and name the component, the flag and the address.
func TestRunRefusesPortsInUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *Config, port int)
		want string // component and flag named in the error
	}{
		{"registry gRPC", func(c *Config, p int) { c.Ports.Registry = p }, "registry --grpc-addr"},
		{"router metrics", func(c *Config, p int) { c.Ports.RouterMetrics = p }, "router --metrics-addr"},
		{"embedded etcd peer", func(c *Config, p int) { c.Ports.EtcdPeer = p }, "registry --embedded-etcd-peer-url"},
		{"embedded NATS", func(c *Config, p int) { c.Ports.NATS = p }, "eventbus --embedded-nats-port"},
		{"second mocker's metrics", func(c *Config, p int) { c.Ports.MockerMetrics = p - 2 }, "mocker-2 --metrics-addr"},
		{"frontend HTTP", func(c *Config, p int) { c.HTTPPort = p }, "frontend --http-addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			port := l.Addr().(*net.TCPAddr).Port
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "frontend"), nil, 0o755); err != nil {
				t.Fatal(err)
			}
			c := Config{BinDir: dir, DataDir: dir, HTTPPort: 8000, Mockers: 2, RouterMode: "kv", KVEventsMode: "jetstream",
				Host: "127.0.0.1", Wait: time.Second, StopTimeout: time.Second}
			tc.set(&c, port)
			err = Run(context.Background(), c, io.Discard)
			if err == nil {
				t.Fatal("Run started a stack on a port another process holds")
			}
			if want := tc.want + " " + l.Addr().String(); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
			if !strings.Contains(err.Error(), "another Switchyard running") {
				t.Errorf("error %q does not say what to do", err)
			}
			if logs, _ := os.ReadDir(filepath.Join(dir, "logs")); len(logs) > 0 {
				t.Errorf("Run started components before it checked the ports: %d logs", len(logs))
			}
		})
	}
}

// TestPlanWithPlanner checks the planner's place in the stack: last, on
// loopback, with the local connector starting the stack's mocker binary
// with the mockers' arguments, and the replica bounds passed through.
func TestPlanWithPlanner(t *testing.T) {
	dir := t.TempDir()
	c := Config{BinDir: dir, DataDir: dir, HTTPPort: 8000, Mockers: 1, RouterMode: "kv", Host: "127.0.0.1", Planner: true, MinReplicas: 1, MaxReplicas: 3}
	plan := c.plan()
	pl := plan[len(plan)-1]
	if pl.name != "planner" || len(plan) != 5 {
		t.Fatalf("plan ends with %s (%d components), want the planner after registry, eventbus, router and a mocker", pl.name, len(plan))
	}
	args := map[string]string{}
	for i := 0; i+1 < len(pl.args); i += 2 {
		args[pl.args[i]] = pl.args[i+1]
	}
	for flag, want := range map[string]string{
		"--grpc-addr": "127.0.0.1:7004", "--metrics-addr": "127.0.0.1:9104", "--status-addr": "127.0.0.1:9105",
		"--connector": "local", "--worker-command": filepath.Join(dir, "mocker"), "--worker-host": "127.0.0.1",
		"--min-replicas": "1", "--max-replicas": "3",
	} {
		if args[flag] != want {
			t.Errorf("planner %s %q, want %q", flag, args[flag], want)
		}
	}
	if wa := args["--worker-args"]; !strings.Contains(wa, "--registry-addr 127.0.0.1:7001") || strings.Contains(wa, "--metrics-addr") {
		t.Errorf("--worker-args %q: want the mockers' arguments without a metrics port", wa)
	}
	if err := (Config{Mockers: 1, HTTPPort: 1, Host: "h", Planner: true, MinReplicas: 3, MaxReplicas: 2}).Validate(); err == nil {
		t.Error("min replicas past max accepted")
	}
}

// TestPlanDisaggregated: --prefill-workers and --decode-workers start
// mockers of those roles after the aggregated ones, each on a metrics port
// of its own and ready once it registered, and the router pairs them as
// --disaggregation says.
func TestPlanDisaggregated(t *testing.T) {
	dir := t.TempDir()
	c := Config{BinDir: dir, DataDir: dir, HTTPPort: 8000, Mockers: 1, PrefillWorkers: 2, DecodeWorkers: 2, RouterMode: "kv", Host: "127.0.0.1",
		Disaggregation: "always"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, comp := range c.plan() {
		args := map[string]string{}
		for i := 0; i+1 < len(comp.args); i++ {
			args[comp.args[i]] = comp.args[i+1]
		}
		switch {
		case comp.name == "router":
			if d := args["--disaggregation"]; d != "always" {
				t.Errorf("router --disaggregation %q, want always", d)
			}
		case comp.bin == "mocker":
			got = append(got, fmt.Sprintf("%s %s %s", comp.name, args["--disaggregation-mode"], args["--metrics-addr"]))
		}
	}
	want := []string{"mocker-1  127.0.0.1:9111", "prefill-1 prefill 127.0.0.1:9112", "prefill-2 prefill 127.0.0.1:9113",
		"decode-1 decode 127.0.0.1:9114", "decode-2 decode 127.0.0.1:9115"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("workers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"aggregated", Config{Mockers: 2}, true},
		{"disaggregated", Config{PrefillWorkers: 2, DecodeWorkers: 2}, true},
		{"decode only", Config{DecodeWorkers: 1}, true},
		{"prefill only", Config{PrefillWorkers: 1}, false},
		{"no worker", Config{}, false},
		{"negative", Config{Mockers: 2, DecodeWorkers: -1}, false},
		{"unknown disaggregation", Config{PrefillWorkers: 1, DecodeWorkers: 1, Disaggregation: "sometimes"}, false},
	} {
		tc.c.HTTPPort, tc.c.Host = 8000, "127.0.0.1"
		if err := tc.c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
