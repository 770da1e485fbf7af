package pyworker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testport"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/worker/workertest"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
	"github.com/switchyard-llm/switchyard/services/registry/registrytest"
)

// TestPythonWorkerStartsBeforeTheControlPlane starts worker.py while the
// registry, the etcd behind it, or the eventbus it uploads its tokenizer to
// is not up: it must not exit, it serves generate meanwhile, keeps retrying,
// and registers (with its model card) once the control plane comes up.
func TestPythonWorkerStartsBeforeTheControlPlane(t *testing.T) {
	t.Parallel()
	requirePython(t)
	for _, tc := range []struct {
		name string
		// retrying is the log line of a failed attempt that will be retried,
		// and failures how many to wait for: 2 shows a retry, but a registry
		// without etcd answers only at its store timeout (5 s), so 1 there.
		retrying string
		failures int
		// tokenizer makes the worker upload one (so that it needs the eventbus).
		tokenizer bool
		// down makes the control plane unreachable, and returns the
		// registry and eventbus addresses to give the worker and how to
		// bring them up.
		down func(t *testing.T, etcd *registrytest.Etcd, reg *registrytest.Registry, busAddr string) (regAddr, busAddr2 string, up func())
	}{
		{"registry not started", "registration failed; retrying", 2, false,
			func(t *testing.T, etcd *registrytest.Etcd, reg *registrytest.Registry, busAddr string) (string, string, func()) {
				reg.Stop()
				addr := testport.Reserve(t).Addr() // refused until the service starts there
				return addr, busAddr, func() { registrytest.StartRegistryAt(t, etcd.Endpoints, addr) }
			}},
		{"etcd down behind the registry", "registration failed; retrying", 1, false,
			func(t *testing.T, etcd *registrytest.Etcd, reg *registrytest.Registry, busAddr string) (string, string, func()) {
				etcd.Stop()
				return reg.Addr, busAddr, etcd.Start
			}},
		{"eventbus not started", "tokenizer upload failed; retrying", 2, true,
			func(t *testing.T, etcd *registrytest.Etcd, reg *registrytest.Registry, _ string) (string, string, func()) {
				addr := testport.Reserve(t).Addr() // refused until the service starts there
				return reg.Addr, addr, func() {
					cfg := eventbustest.Config(eventbustest.StartNATS(t).ClientURL())
					cfg.Server.GRPCAddr = addr
					eventbustest.StartEventbus(t, cfg)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			etcd, reg := registrytest.Start(t)
			_, bus := eventbustest.Start(t)
			regAddr, busAddr, up := tc.down(t, etcd, reg, bus.Addr().String())
			var extra []string
			if tc.tokenizer {
				dir := t.TempDir()
				if _, err := qwen3.WriteTo(dir); err != nil {
					t.Fatal(err)
				}
				extra = append(extra, "--tokenizer-dir", dir)
			}
			w := startWorker(t, regAddr, busAddr, extra...)
			w.logs.waitForN(ctx, t, tc.retrying, tc.failures)
			client, err := transport.NewClient(httpConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			// The worker binds port 0 and says where it serves: a port
			// chosen here and bound by it later could be another test
			// process's by then.
			w.logs.waitFor(ctx, t, "request plane serving", nil)
			serving, _ := w.logs.first("request plane serving")["transport"].(string)
			addr := transport.Address{Kind: transport.PlaneHTTP, Addr: strings.TrimPrefix(serving, "http:")}
			if got, err := workertest.Generate(ctx, client, addr, &workerv1.GenerateRequest{RequestId: "early", TokenIds: seq(1, 4), MaxTokens: 2}); err != nil || len(got) != 2 {
				t.Fatalf("generate before registering = %v, %v; want it served", got, err)
			}
			up()
			w.logs.waitFor(ctx, t, "worker registered", nil)
			dc, err := registryclient.Dial([]string{regAddr}, registryclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer dc.Close()
			list, err := dc.Raw().ListInstances(ctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: namespace}})
			if err != nil || len(list.Instances) != 1 || list.Instances[0].Transport.GetHttp() != addr.Addr {
				t.Fatalf("ListInstances = %v, %v; want the worker at %s", list, err, addr.Addr)
			}
			cards, err := dc.Raw().ListModels(ctx, &registryv1.ListModelsRequest{})
			if err != nil || len(cards.Cards) != 1 || cards.Cards[0].InstanceId != list.Instances[0].InstanceId ||
				(len(cards.Cards[0].Tokenizer) > 0) != tc.tokenizer {
				t.Fatalf("ListModels = %v, %v; want the worker's card (tokenizer %v)", cards, err, tc.tokenizer)
			}
			if code := w.stop(t); code != 0 {
				t.Fatalf("worker.py exited with %d after SIGTERM; want 0", code)
			}
		})
	}
}

func httpConfig() transport.Config {
	tc := transport.DefaultConfig()
	tc.Plane = transport.PlaneHTTP
	return tc
}
