package planner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/services/planner/core"
)

// LocalConfig is the local connector's: the worker command it starts, one
// process per worker.
type LocalConfig struct {
	// Command is the worker binary (a mocker, an adapter); Args its
	// arguments, split at white space. A worker of a prefill or decode
	// pool gets --disaggregation-mode with the role too.
	Command, Args string
	// Host is where the workers serve their request plane
	// (DYN_TCP_RPC_HOST); each gets a port of its own (DYN_TCP_RPC_PORT),
	// by which the planner knows its instance once registered.
	Host string
	// LogDir receives each worker's output as worker-<port>.log; empty
	// discards it.
	LogDir string
	// StopTimeout bounds a draining worker's stop before it is killed.
	StopTimeout time.Duration
}

// RegisterFlags adds the local connector's flags.
func (c *LocalConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Command, "worker-command", "bin/mocker", "local connector: the worker binary to start, one process per worker")
	fs.StringVar(&c.Args, "worker-args", "", "local connector: the worker's arguments, separated by spaces")
	fs.StringVar(&c.Host, "worker-host", "127.0.0.1", "local connector: the workers' request plane host (DYN_TCP_RPC_HOST)")
	fs.StringVar(&c.LogDir, "worker-log-dir", "", "local connector: directory of the workers' logs (empty: discarded)")
	fs.DurationVar(&c.StopTimeout, "worker-stop-timeout", 60*time.Second, "local connector: bound on a draining worker's stop before it is killed")
}

// Validate checks the settings; it reads nothing.
func (c LocalConfig) Validate() error {
	if c.Command == "" || c.Host == "" || c.StopTimeout <= 0 {
		return errors.New("--connector local needs --worker-command, --worker-host and a positive --worker-stop-timeout")
	}
	return nil
}

// local starts and stops worker processes on this machine. A worker goes
// by SIGTERM: a Switchyard worker then deregisters (routers stop sending it
// requests), finishes what it runs, and exits.
type local struct {
	cfg LocalConfig
	log *slog.Logger
	mu  sync.Mutex
	// procs are the running workers it started, by request plane port.
	procs map[int]*workerProc
	wg    sync.WaitGroup
}

type workerProc struct {
	pool     core.PoolKey
	port     int
	cmd      *exec.Cmd
	id       uint64 // the instance, once registered
	draining bool
	exited   chan struct{}
}

func newLocal(cfg LocalConfig, log *slog.Logger) *local {
	return &local{cfg: cfg, log: log, procs: map[int]*workerProc{}}
}

func (l *local) addr(port int) string { return net.JoinHostPort(l.cfg.Host, strconv.Itoa(port)) }

// match learns the instance ids of started workers from ms, by address.
func (l *local) match(ms []member) {
	for _, m := range ms {
		tcp := m.inst.GetTransport().GetTcp()
		_, p, err := net.SplitHostPort(tcp)
		if err != nil {
			continue
		}
		port, _ := strconv.Atoi(p)
		if w := l.procs[port]; w != nil && tcp == l.addr(port) {
			w.id = m.inst.InstanceId
		}
	}
}

func (l *local) Starting(ms []member) map[core.PoolKey]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.match(ms)
	out := map[core.PoolKey]int{}
	for _, w := range l.procs {
		if w.id == 0 && !w.draining {
			out[w.pool]++
		}
	}
	return out
}

func (l *local) Pinned(in *registryv1.Instance) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.procs {
		if w.id == in.InstanceId {
			return false
		}
	}
	return true
}

func (l *local) Draining(id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.procs {
		if w.id == id && w.draining {
			return true
		}
	}
	return false
}

func (l *local) Ready(context.Context) (bool, string) { return true, "" }

func (l *local) Apply(ctx context.Context, d core.Decision, ms []member) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.match(ms)
	var errs []error
	for _, p := range d.Pools {
		for _, id := range p.Drain {
			for _, w := range l.procs {
				if w.id == id && !w.draining {
					l.drain(w)
				}
			}
		}
		for range max(p.Target-p.Current, 0) {
			if err := l.start(p.PoolKey); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// drain sends SIGTERM, and SIGKILL after StopTimeout.
func (l *local) drain(w *workerProc) {
	w.draining = true
	l.log.Info("draining worker", "instance_id", fmt.Sprintf("%x", w.id), "pid", w.cmd.Process.Pid, "pool", w.pool.String())
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		select {
		case <-w.exited:
		case <-time.After(l.cfg.StopTimeout):
			l.log.Warn("worker still running after --worker-stop-timeout: killed", "pid", w.cmd.Process.Pid)
			_ = w.cmd.Process.Kill()
		}
	}()
}

// start starts one worker of pool on a port of its own.
func (l *local) start(pool core.PoolKey) error {
	port, err := freePort(l.cfg.Host)
	if err != nil {
		return err
	}
	args := strings.Fields(l.cfg.Args)
	if pool.Role != core.Agg {
		args = append(args, "--disaggregation-mode", string(pool.Role))
	}
	cmd := exec.Command(l.cfg.Command, args...)
	cmd.Env = append(os.Environ(), "DYN_REQUEST_PLANE=tcp", "DYN_TCP_RPC_HOST="+l.cfg.Host, "DYN_TCP_RPC_PORT="+strconv.Itoa(port))
	var out io.WriteCloser
	if l.cfg.LogDir != "" {
		f, err := os.Create(filepath.Join(l.cfg.LogDir, "worker-"+strconv.Itoa(port)+".log"))
		if err != nil {
			return err
		}
		out = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	// Its own process group (a terminal's Ctrl-C reaches the planner,
	// which drains its workers), and SIGTERM should the planner die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		if out != nil {
			out.Close()
		}
		return fmt.Errorf("start worker %s: %w", l.cfg.Command, err)
	}
	w := &workerProc{pool: pool, port: port, cmd: cmd, exited: make(chan struct{})}
	l.procs[port] = w
	l.log.Info("started worker", "pool", pool.String(), "pid", cmd.Process.Pid, "addr", l.addr(port))
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		err := cmd.Wait()
		if out != nil {
			out.Close()
		}
		close(w.exited)
		l.mu.Lock()
		delete(l.procs, port)
		draining := w.draining
		l.mu.Unlock()
		if !draining {
			l.log.Warn("worker exited without being drained", "pid", cmd.Process.Pid, "err", fmt.Sprint(err))
		} else {
			l.log.Info("drained worker exited", "pid", cmd.Process.Pid, "err", fmt.Sprint(err))
		}
	}()
	return nil
}

// Close drains every worker it started and waits for them.
func (l *local) Close(ctx context.Context) error {
	l.mu.Lock()
	for _, w := range l.procs {
		if !w.draining {
			l.drain(w)
		}
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		for _, w := range l.procs {
			_ = w.cmd.Process.Kill()
		}
		l.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// freePort is a port of host nobody listens on now.
func freePort(host string) (int, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port, nil
}
