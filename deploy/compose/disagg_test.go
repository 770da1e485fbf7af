package compose_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	"github.com/switchyard-llm/switchyard/services/mocker"
)

// composeService is what TestComposeDisaggProfile reads of a service.
type composeService struct {
	Profiles  []string       `json:"profiles"`
	Command   []string       `json:"command"`
	Ports     []string       `json:"ports"`
	DependsOn map[string]any `json:"depends_on"`
	Build     *struct {
		Args map[string]string `json:"args"`
	} `json:"build"`
}

// TestComposeDisaggProfile reads docker-compose.yaml's disaggregated form
// (--profile disagg) without an engine: its mockers' arguments parse with
// the mocker's own flags into a prefill and a decode pool; each service it
// runs is in the profile, and so is each one it depends on (Compose refuses
// a dependency outside the active profiles); the single form's own workers
// and frontend stay out of it, and the frontend publishes :8000.
func TestComposeDisaggProfile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]composeService `json:"services"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	in := func(s composeService, profile string) bool { return slices.Contains(s.Profiles, profile) }
	pools := map[commonv1.Role]int{}
	var frontends []string
	for name, s := range file.Services {
		if !in(s, "disagg") {
			continue
		}
		for dep := range s.DependsOn {
			if d, ok := file.Services[dep]; !ok || !in(d, "disagg") {
				t.Errorf("%s depends on %s, which is not in the profile disagg", name, dep)
			}
		}
		if s.Build == nil {
			continue
		}
		switch s.Build.Args["SERVICE"] {
		case "mocker":
			var cfg mocker.Config
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			cfg.RegisterFlags(fs)
			if err := fs.Parse(s.Command); err != nil || fs.NArg() != 0 {
				t.Fatalf("%s: the mocker does not take %q: %v", name, s.Command, err)
			}
			if err := cfg.Disagg.Validate(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			pools[cfg.Disagg.Role()]++
		case "frontend":
			frontends = append(frontends, name)
			if !slices.Contains(s.Ports, "8000:8000") {
				t.Errorf("%s publishes %v, want 8000:8000", name, s.Ports)
			}
		}
	}
	if pools[commonv1.Role_ROLE_PREFILL] < 1 || pools[commonv1.Role_ROLE_DECODE] < 1 || len(pools) != 2 {
		t.Errorf("the profile's mockers by role: %v; want a prefill and a decode pool and nothing else", pools)
	}
	if len(frontends) != 1 {
		t.Errorf("frontends in the profile: %v, want one", frontends)
	}
	for _, name := range []string{"mocker-1", "mocker-2", "frontend"} {
		if in(file.Services[name], "disagg") {
			t.Errorf("%s (the single form's) is in the profile disagg", name)
		}
	}
	for _, name := range []string{"etcd", "nats", "registry", "eventbus", "router"} {
		if s := file.Services[name]; !in(s, "disagg") || !in(s, "single") {
			t.Errorf("%s has profiles %v, want both forms'", name, s.Profiles)
		}
	}
	if t.Failed() {
		t.Logf("services: %s", strings.Join(keys(file.Services), ", "))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestComposeDisaggLive runs the file's disaggregated form (--profile
// disagg) in the engine: `switchyard status` lists its two pools, and every
// chat, sent four at a time, is answered with its decode on a worker of the
// decode pool and its prefill, when the router sends it away (the frontend
// names the worker in X-Switchyard-Prefill-Worker), on one of the prefill
// pool. The router's default --disaggregation auto computes a prompt on the
// decode worker when that gives the first token sooner (an idle decode
// worker and a short prompt), so how many went remote is reported, not
// asserted.
func TestComposeDisaggLive(t *testing.T) {
	s := startStack(t, "disagg")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const front = "http://127.0.0.1:8000"
	s.waitFor(ctx, front+" answers the README's curl", 4*time.Minute, func() error { return chat(ctx, front, readmeChat) })
	roles := map[string]string{}
	s.waitFor(ctx, "status lists 2 prefill and 2 decode workers", time.Minute, func() error {
		st, err := s.status(ctx)
		if err != nil {
			return err
		}
		// An instance is listed once per endpoint it serves.
		clear(roles)
		for _, in := range st.Instances {
			roles[in.ID] = in.Role
		}
		pools := map[string]int{}
		for _, role := range roles {
			pools[role]++
		}
		if pools["prefill"] != 2 || pools["decode"] != 2 || len(roles) != 4 {
			return fmt.Errorf("pools %v", pools)
		}
		return nil
	})
	const requests, clients = 24, 4
	var (
		mu     sync.Mutex
		legs   = map[string]int{}
		remote int
		errs   []string
		wg     sync.WaitGroup
	)
	long := strings.Repeat("Tell me about trains, their timetables and the stations they stop at. ", 40)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < requests; i += clients {
				h, err := chatHeader(ctx, front, chatBody(fmt.Sprintf("Question %d. %s", i, long), 8))
				mu.Lock()
				switch p, d := h.Get("X-Switchyard-Prefill-Worker"), h.Get("X-Switchyard-Worker"); {
				case err != nil:
					errs = append(errs, fmt.Sprintf("request %d: %v", i, err))
				case roles[d] != "decode" || p != "" && roles[p] != "prefill":
					errs = append(errs, fmt.Sprintf("request %d: prefill leg on %q (%s), decode on %q (%s)", i, p, roles[p], d, roles[d]))
				default:
					legs["decode "+d]++
					if p != "" {
						legs["prefill "+p]++
						remote++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	t.Logf("%d chats, %d at a time: %d with the prefill on the prefill pool; legs %v", requests, clients, remote, legs)
}
