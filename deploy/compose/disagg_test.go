package compose_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
