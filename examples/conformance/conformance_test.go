package conformance_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/examples/conformance"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

// need skips the test on a developer machine that lacks a toolchain, and
// fails it in CI, where .ci/run installs everything.
func need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s: %v", what, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func secs(d time.Duration) string { return fmt.Sprint(d.Seconds()) }

// goWorker is pkg/worker (the goworker command, built into bin) on plane.
func goWorker(bin string, plane transport.Plane) conformance.Worker {
	return conformance.Worker{Name: "go-" + string(plane), Plane: plane, UploadsTokenizer: true,
		Command: func(t testing.TB, s conformance.Settings) *exec.Cmd {
			return exec.Command(bin, "--namespace", s.Namespace, "--component", s.Component, "--endpoint", s.Endpoint,
				"--model-name", s.ModelName, "--block-size", fmt.Sprint(s.BlockSize), "--context-length", fmt.Sprint(s.ContextLength),
				"--registry-addr", s.RegistryAddr, "--eventbus-addr", s.EventbusAddr, "--lease-ttl", s.LeaseTTL.String(),
				"--drain-timeout", s.DrainTimeout.String(), "--load-interval", "100ms", "--token-delay", "5ms",
				"--tokenizer-dir", s.TokenizerDir)
		}}
}

func buildGoWorker(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "goworker")
	if out, err := exec.Command("go", "build", "-o", bin, "./goworker").CombinedOutput(); err != nil {
		t.Fatalf("go build ./goworker: %v\n%s", err, out)
	}
	return bin
}

// TestGoSDK runs the suite against pkg/worker (the goworker command).
func TestGoSDK(t *testing.T) {
	t.Parallel()
	bin := buildGoWorker(t)
	for _, plane := range []transport.Plane{transport.PlaneTCP, transport.PlaneHTTP} {
		t.Run(string(plane), func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, goWorker(bin, plane))
		})
	}
}

// TestFirstStartBeforeTheRegistry starts each worker before its registry
// (conformance.RunFirstStart): none may exit; each registers once the
// registry is up.
func TestFirstStartBeforeTheRegistry(t *testing.T) {
	t.Parallel()
	for _, w := range []conformance.Worker{goWorker(buildGoWorker(t), transport.PlaneTCP), pythonWorker(), nodeWorker()} {
		t.Run(w.Name, func(t *testing.T) { conformance.RunFirstStart(t, w) })
	}
}

// TestPythonWorker runs the suite against examples/python-worker.
func TestPythonWorker(t *testing.T) {
	t.Parallel()
	conformance.Run(t, pythonWorker())
}

func pythonWorker() conformance.Worker {
	const python = "/usr/bin/python3"
	return conformance.Worker{Name: "python", Plane: transport.PlaneHTTP,
		Require: func(t testing.TB) {
			out, err := exec.Command(python, "-c", "import grpc, google.protobuf, xxhash, h2").CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
			}
			need(t, "the Python worker needs python3-grpcio python3-protobuf python3-xxhash python3-h2", err)
		},
		Command: func(t testing.TB, s conformance.Settings) *exec.Cmd {
			cmd := exec.Command(python, "worker.py", "--namespace", s.Namespace, "--component", s.Component, "--endpoint", s.Endpoint,
				"--model-name", s.ModelName, "--block-size", fmt.Sprint(s.BlockSize), "--context-length", fmt.Sprint(s.ContextLength),
				"--registry-addr", s.RegistryAddr, "--eventbus-addr", s.EventbusAddr, "--lease-ttl", fmt.Sprint(int(s.LeaseTTL.Seconds())),
				"--drain-timeout", secs(s.DrainTimeout), "--load-interval", "0.1", "--token-delay", "0.005")
			cmd.Dir = filepath.Join("..", "python-worker")
			return cmd
		}}
}

// TestNodeWorker runs the suite against examples/node-worker.
func TestNodeWorker(t *testing.T) {
	t.Parallel()
	conformance.Run(t, nodeWorker())
}

func nodeWorker() conformance.Worker {
	dir := filepath.Join("..", "node-worker")
	return conformance.Worker{Name: "node", Plane: transport.PlaneHTTP, UploadsTokenizer: true,
		Require: func(t testing.TB) {
			_, err := exec.LookPath("node")
			if err == nil {
				_, err = os.Stat(filepath.Join(dir, "node_modules", "tsx"))
			}
			need(t, "the Node worker needs node and `npm ci` in examples/node-worker", err)
		},
		Command: func(t testing.TB, s conformance.Settings) *exec.Cmd {
			cmd := exec.Command("node", "--import", "tsx", "src/worker.ts", "--namespace", s.Namespace, "--component", s.Component,
				"--endpoint", s.Endpoint, "--model-name", s.ModelName, "--block-size", fmt.Sprint(s.BlockSize),
				"--context-length", fmt.Sprint(s.ContextLength), "--registry-addr", s.RegistryAddr, "--eventbus-addr", s.EventbusAddr,
				"--lease-ttl", fmt.Sprint(int(s.LeaseTTL.Seconds())), "--drain-timeout", secs(s.DrainTimeout), "--load-interval", "0.1",
				"--token-delay", "0.005", "--tokenizer-dir", s.TokenizerDir)
			cmd.Dir = dir
			return cmd
		}}
}
