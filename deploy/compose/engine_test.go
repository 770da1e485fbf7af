package compose_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needs skips the test when a tool it needs is missing, and fails it under
// CI=true, where .ci/run installs them all.
func needs(t *testing.T, why string) {
	t.Helper()
	msg := "needs " + why
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// engine is a Docker engine the test talks to: one already running, or one
// it started itself (own data root, exec root and socket under a temporary
// directory, no default bridge and no iptables rules on the host), which it
// stops at the end.
type engine struct {
	docker string // the docker CLI
	host   string // DOCKER_HOST
	cmd    *exec.Cmd
	dir    string
	// tagged are the tags the test added to an engine it did not start,
	// removed at the end.
	tagged []string
}

// startEngine finds a running engine (DOCKER_HOST, or the default socket)
// or starts one.
func startEngine(t *testing.T) *engine {
	t.Helper()
	docker, err := exec.LookPath("docker")
	if err != nil {
		needs(t, "the docker CLI (apt-get install docker.io)")
	}
	e := &engine{docker: docker, host: os.Getenv("DOCKER_HOST")}
	if e.host == "" {
		e.host = "unix:///var/run/docker.sock"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.run(ctx, "version", "--format", "{{.Server.Version}}"); err == nil {
		t.Logf("using the running Docker engine at %s", e.host)
		t.Cleanup(func() {
			for _, tag := range e.tagged {
				_, _ = e.run(context.Background(), "rmi", "--no-prune", tag)
			}
		})
		return e
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		needs(t, "dockerd (apt-get install docker.io)")
	}
	if os.Geteuid() != 0 {
		needs(t, "root to start a Docker engine (none is running)")
	}
	// A short path: the sockets under it must fit in sun_path.
	dir, err := os.MkdirTemp("", "sy-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	e.dir, e.host = dir, "unix://"+filepath.Join(dir, "docker.sock")
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Networks get /24s of a 10.x.0.0/16 chosen per run, so that two runs
	// at once do not route the same subnet.
	pool := fmt.Sprintf("base=10.%d.0.0/16,size=24", 200+rand.IntN(50))
	e.cmd = exec.Command(dockerd,
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "-H", e.host,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--default-address-pool", pool)
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- e.cmd.Wait() }()
	t.Cleanup(func() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("dockerd log (last 4 kB):\n%s", tail(b, 4096))
			}
		}
		// dockerd unmounts its layers on the way out; what it could not
		// leaves the directory behind rather than failing the test.
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("left %s: %v", dir, err)
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := e.run(ctx, "version", "--format", "{{.Server.Version}}")
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("dockerd exited: %v\n%s", err, tail(b, 4096))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd did not answer on %s in 90 s: %v", e.host, err)
		}
	}
	t.Logf("started a Docker engine at %s", e.host)
	return e
}

// env is the environment of docker and compose commands.
func (e *engine) env() []string { return append(os.Environ(), "DOCKER_HOST="+e.host) }

// run runs the docker CLI and returns its standard output.
func (e *engine) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.docker, args...)
	cmd.Env = e.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, tail(errb.Bytes(), 2048))
	}
	return out.String(), nil
}

// load loads an image tarball and returns the tag it carried.
func (e *engine) load(ctx context.Context, path string) (string, error) {
	out, err := e.run(ctx, "load", "-i", path)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if tag, ok := strings.CutPrefix(strings.TrimSpace(line), "Loaded image: "); ok {
			return tag, nil
		}
	}
	return "", fmt.Errorf("docker load -i %s said no tag: %q", path, out)
}

// tag gives image src the name dst. In an engine the test did not start, a
// name already there (the real image) is left as it is, and a name the test
// adds is removed at the end.
func (e *engine) tag(ctx context.Context, src, dst string) error {
	if e.cmd == nil {
		if _, err := e.run(ctx, "image", "inspect", dst); err == nil {
			return nil
		}
		e.tagged = append(e.tagged, dst)
	}
	_, err := e.run(ctx, "tag", src, dst)
	return err
}

// composeCommand is how compose is run here: the v2 plugin (`docker
// compose`) if the CLI has it, else Debian's docker-compose (v1).
func (e *engine) composeCommand(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := e.run(ctx, "compose", "version", "--short"); err == nil {
		t.Logf("compose: docker compose %s", strings.TrimSpace(out))
		return []string{e.docker, "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		out, _ := exec.CommandContext(ctx, p, "version", "--short").Output()
		t.Logf("compose: docker-compose %s", strings.TrimSpace(string(out)))
		return []string{p}
	}
	needs(t, "docker compose or docker-compose (apt-get install docker-compose)")
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
