package compose_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/routerclient"
	"github.com/switchyard-llm/switchyard/pkg/testleak"
	"github.com/switchyard-llm/switchyard/services/ctl"
	"github.com/switchyard-llm/switchyard/services/router/routertest"
)

var etcdOutage = flag.Duration("etcd-outage", 0, "how long etcd's container stays killed (0: 25s, 5s with -short)")

func TestMain(m *testing.M) {
	testleak.VerifyTestMain(m)
}

// model is the model the compose file's mockers serve (the mocker's default).
const model = "Qwen/Qwen3-0.6B"

// readmeChat is the README's curl body.
const readmeChat = `{"model": "Qwen/Qwen3-0.6B", "messages": [{"role": "user", "content": "Hello!"}]}`

// TestComposeStack runs docker-compose.yaml's single form as a user does,
// through its published ports, and injects the faults a compose user meets:
// etcd killed for a while and started again (no worker container restarts
// or exits, every request after recovery succeeds) and NATS restarted (no
// acknowledged KV event lost: a router replaying the stream indexes what the
// running router does, with no gap). Then `down -v` leaves nothing.
func TestComposeStack(t *testing.T) {
	outage := *etcdOutage
	if outage == 0 {
		outage = 25 * time.Second
		if testing.Short() {
			outage = 5 * time.Second
		}
	}
	s := startStack(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The README's two commands, as a user types them after `up`.
	frontend := "http://127.0.0.1:8000"
	s.waitFor(ctx, "the frontend answers the README's curl", 3*time.Minute, func() error {
		return chat(ctx, frontend, readmeChat)
	})
	s.mark("the frontend answered")
	models, err := get(ctx, frontend+"/v1/models")
	if err != nil || !strings.Contains(models, model) {
		t.Fatalf("GET /v1/models = %q, %v; want %s", models, err, model)
	}
	s.waitFor(ctx, "switchyard status sees 2 workers", time.Minute, func() error { return s.workers(ctx, 2) })

	var rows []faultRow
	rows = append(rows, s.killEtcd(ctx, outage, frontend, []string{"mocker-1", "mocker-2"}))
	s.mark("etcd killed and back")
	rows = append(rows, s.restartNATS(ctx, frontend))
	s.mark("NATS restarted")
	printRows(t, rows)
	for _, r := range rows {
		if r.failed != "" {
			t.Errorf("%s: %s", r.fault, r.failed)
		}
	}
	s.down(ctx)
	s.mark("down")
}

// faultRow is one line of the fault table.
type faultRow struct {
	fault                     string
	duration                  time.Duration
	tried, succeeded          int // requests after recovery
	workersLost, eventsLost   int
	converge                  time.Duration
	duringTried, duringServed int // requests during the fault (not judged)
	failed                    string
}

func printRows(t *testing.T, rows []faultRow) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %9s %14s %12s %11s %10s %16s\n", "fault", "duration", "after: tried", "succeeded", "workers lost", "events lost", "time to converge")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-28s %9s %14d %12d %11d %10d %16s   (during the fault: %d of %d served)\n",
			r.fault, r.duration.Round(100*time.Millisecond), r.tried, r.succeeded, r.workersLost, r.eventsLost,
			r.converge.Round(100*time.Millisecond), r.duringServed, r.duringTried)
	}
	t.Logf("fault table:\n%s", b.String())
	fmt.Print(b.String())
}

// stack is one compose project in an engine.
type stack struct {
	t       *testing.T
	e       *engine
	compose []string
	root    string
	project string
	profile string
	cli     string // the switchyard CLI binary
	began   time.Time
}

// mark logs what the test just did and when, counted from the engine's
// start: the phases of a slow run, in its log.
func (s *stack) mark(what string) {
	s.t.Helper()
	s.t.Logf("+%s %s", time.Since(s.began).Round(100*time.Millisecond), what)
}

// startStack builds the images, loads them into an engine, gives the test
// images the etcd and NATS names the compose file asks for, and brings the
// file up (profile "" is the single form) with `up --no-build`.
func startStack(t *testing.T, profile string) *stack {
	t.Helper()
	if testing.Short() && profile != "" {
		t.Skip("the cluster and disaggregated forms run in make test-long")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	e := startEngine(t)
	s := &stack{t: t, e: e, began: began, compose: e.composeCommand(t), root: root, profile: profile,
		project: fmt.Sprintf("sy%s%d", profile, os.Getpid())}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	ports := []int{8000, 7001, 7002, 7003}
	if profile == "ha" {
		ports = []int{8001, 8002}
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("the compose file publishes port %d, which is taken here: %v", p, err)
		}
		l.Close()
	}

	// SWITCHYARD_IMAGES names a directory where make images and make
	// test-images already wrote the tarballs (they must be of this tree);
	// by default the test builds them, as those targets do.
	images := os.Getenv("SWITCHYARD_IMAGES")
	builds := [][]string{}
	if images == "" {
		images = t.TempDir()
		builds = [][]string{{"-out", images}, {"-test-images", "-out", images}}
	}
	start := time.Now()
	for _, args := range builds {
		cmd := exec.CommandContext(ctx, "go", append([]string{"run", "./hack/images"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go run ./hack/images %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Logf("images built in %s", time.Since(start).Round(time.Second))
	cliBin := filepath.Join(t.TempDir(), "switchyard")
	build := exec.CommandContext(ctx, "go", "build", "-o", cliBin, "./services/ctl/cmd/switchyard")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the CLI: %v\n%s", err, out)
	}
	s.cli = cliBin

	start = time.Now()
	tars, err := filepath.Glob(filepath.Join(images, "*.tar"))
	if err != nil || len(tars) < 8 {
		t.Fatalf("image tarballs: %v, %v", tars, err)
	}
	loaded := map[string]string{}
	for _, p := range tars {
		tag, err := e.load(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		loaded[strings.TrimSuffix(filepath.Base(p), ".tar")] = tag
	}
	names, err := officialImages(filepath.Join(root, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for official, test := range names {
		if err := e.tag(ctx, loaded[test], official); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s stands in for %s", loaded[test], official)
	}
	t.Logf("images loaded in %s", time.Since(start).Round(time.Second))

	t.Cleanup(func() {
		// Whatever happened, nothing of the project stays.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if t.Failed() {
			if out, err := s.run(ctx, "logs", "--no-color", "--tail", "40"); err == nil {
				t.Logf("compose logs:\n%s", tail([]byte(out), 16384))
			}
		}
		_, _ = s.run(ctx, "down", "-v", "--remove-orphans", "--timeout", "5")
	})
	start = time.Now()
	if out, err := s.run(ctx, "up", "-d", "--no-build"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	t.Logf("compose up --no-build returned in %s", time.Since(start).Round(time.Second))
	s.mark("up")
	return s
}

// officialImages maps each etcd and NATS image the compose file names to
// the test image that stands in for it ("etcd" or "nats").
func officialImages(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Services map[string]struct {
			Image string `json:"image"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, s := range f.Services {
		switch {
		case strings.HasPrefix(s.Image, "quay.io/coreos/etcd:"):
			m[s.Image] = "etcd"
		case strings.HasPrefix(s.Image, "nats:"):
			m[s.Image] = "nats"
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%s names no etcd or NATS image", path)
	}
	return m, nil
}

// run runs compose on the project.
func (s *stack) run(ctx context.Context, args ...string) (string, error) {
	full := append(slices.Clone(s.compose[1:]), "-p", s.project, "-f", filepath.Join(s.root, "docker-compose.yaml"))
	if s.profile != "" {
		full = append(full, "--profile", s.profile)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, s.compose[0], full...)
	cmd.Dir = s.root
	cmd.Env = s.e.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(s.compose[0]), strings.Join(full, " "), err, tail(out, 4096))
	}
	return string(out), nil
}

// container is the id of a service's container.
func (s *stack) container(ctx context.Context, service string) (string, error) {
	out, err := s.run(ctx, "ps", "-q", service)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if id == "" || strings.Contains(id, "\n") {
		return "", fmt.Errorf("service %s has containers %q", service, id)
	}
	return id, nil
}

// state is what tells a container restarted or exited.
type state struct {
	Restarts int
	Started  string
	Running  bool
	Health   string
}

func (s *stack) state(ctx context.Context, service string) (state, error) {
	id, err := s.container(ctx, service)
	if err != nil {
		return state{}, err
	}
	out, err := s.e.run(ctx, "inspect", "-f", "{{.RestartCount}}|{{.State.StartedAt}}|{{.State.Running}}|{{if .State.Health}}{{.State.Health.Status}}{{end}}", id)
	if err != nil {
		return state{}, err
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 4 {
		return state{}, fmt.Errorf("inspect %s: %q", service, out)
	}
	n, err := strconv.Atoi(f[0])
	return state{Restarts: n, Started: f[1], Running: f[2] == "true", Health: f[3]}, err
}

// waitFor retries cond until it returns nil, failing the test after d.
func (s *stack) waitFor(ctx context.Context, what string, d time.Duration, cond func() error) time.Duration {
	s.t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	var err error
	for attempt := 0; attempt < 100000; attempt++ {
		if err = cond(); err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	s.t.Fatalf("%s: not within %s: %v", what, d, err)
	return 0
}

// workers checks that `switchyard status` lists n live workers.
func (s *stack) workers(ctx context.Context, n int) error {
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	live := 0
	for _, in := range st.Instances {
		if in.State == "live" {
			live++
		}
	}
	if live != n {
		return fmt.Errorf("%d live workers of %d instances, want %d (problems %q)", live, len(st.Instances), n, st.Problems)
	}
	return nil
}

// status runs `switchyard status -o json` against the published ports.
func (s *stack) status(ctx context.Context) (*ctl.Status, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, s.cli, "status", "-o", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("switchyard status: %w", err)
	}
	var st ctl.Status
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("switchyard status -o json: %w", err)
	}
	return &st, nil
}

// killEtcd kills etcd's container for outage and starts it again. During
// the outage requests are sent and counted; after it, the time until the
// registry has both workers again and a request succeeds is the time to
// converge, and then every one of 20 requests must succeed. No worker
// container may restart or exit.
func (s *stack) killEtcd(ctx context.Context, outage time.Duration, frontend string, workers []string) faultRow {
	t := s.t
	row := faultRow{fault: "compose kill etcd", duration: outage}
	before := map[string]state{}
	for _, w := range workers {
		st, err := s.state(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		before[w] = st
	}
	if _, err := s.run(ctx, "kill", "etcd"); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(outage)
	for i := 0; time.Now().Before(end) && i < 10000; i++ {
		row.duringTried++
		rctx, cancel := context.WithDeadline(ctx, end)
		if chat(rctx, frontend, chatBody(fmt.Sprintf("etcd outage %d", i), 8)) == nil {
			row.duringServed++
		}
		cancel()
	}
	if _, err := s.run(ctx, "start", "etcd"); err != nil {
		t.Fatal(err)
	}
	row.converge = s.waitFor(ctx, "after etcd came back, 2 workers and a request served", 3*time.Minute, func() error {
		if err := s.workers(ctx, 2); err != nil {
			return err
		}
		return chat(ctx, frontend, chatBody("etcd back", 8))
	})
	row.tried, row.succeeded = 20, 0
	for i := range row.tried {
		if err := chat(ctx, frontend, chatBody(fmt.Sprintf("after etcd %d", i), 8)); err == nil {
			row.succeeded++
		} else {
			t.Logf("request %d after etcd recovered: %v", i, err)
		}
	}
	for _, w := range workers {
		st, err := s.state(ctx, w)
		if err != nil || st.Restarts != before[w].Restarts || st.Started != before[w].Started || !st.Running {
			row.workersLost++
			t.Logf("%s: before %+v, after %+v (%v)", w, before[w], st, err)
		}
	}
	if row.succeeded != row.tried || row.workersLost != 0 {
		row.failed = fmt.Sprintf("%d of %d requests after recovery succeeded, %d worker containers restarted or exited", row.succeeded, row.tried, row.workersLost)
	}
	return row
}

// restartNATS sends requests (each a new prompt, so new KV blocks and
// events) while `compose restart nats` runs, then checks that no
// acknowledged event was lost: a router started now, which replays the
// namespace's stream, must index exactly what the running router does and
// find no gap in any worker's events.
func (s *stack) restartNATS(ctx context.Context, frontend string) faultRow {
	t := s.t
	row := faultRow{fault: "compose restart nats"}
	for i := range 10 {
		if err := chat(ctx, frontend, chatBody(fmt.Sprintf("before the NATS restart, prompt %d with its own prefix", i), 4)); err != nil {
			t.Fatalf("request before the NATS restart: %v", err)
		}
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := s.run(ctx, "restart", "nats")
		done <- err
	}()
	var restartErr error
loop:
	for i := 0; i < 10000; i++ {
		select {
		case restartErr = <-done:
			break loop
		default:
		}
		row.duringTried++
		if chat(ctx, frontend, chatBody(fmt.Sprintf("during the NATS restart, prompt %d", i), 4)) == nil {
			row.duringServed++
		}
	}
	row.duration = time.Since(start)
	if restartErr != nil {
		t.Fatal(restartErr)
	}
	row.tried = 20
	recovered := time.Now()
	s.waitFor(ctx, "a request served after NATS restarted", 2*time.Minute, func() error {
		return chat(ctx, frontend, chatBody("NATS back", 4))
	})
	for i := range row.tried {
		if err := chat(ctx, frontend, chatBody(fmt.Sprintf("after the NATS restart, prompt %d", i), 4)); err == nil {
			row.succeeded++
		}
	}

	live, err := routerclient.Dial([]string{"127.0.0.1:7003"}, routerclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	replay, stop := routertest.Start(t, ctx, routertest.Config("127.0.0.1:7001", "127.0.0.1:7002"))
	defer stop()
	var a, b *routerv1.GetStatsResponse
	var mu sync.Mutex
	cond := func() error {
		mu.Lock()
		defer mu.Unlock()
		var err error
		if a, err = live.GetStats(ctx, &routerv1.GetStatsRequest{}); err != nil {
			return err
		}
		if b, err = replay.GetStats(ctx, &routerv1.GetStatsRequest{}); err != nil {
			return err
		}
		if a.IndexedEntries != b.IndexedEntries || a.IndexedBlocks != b.IndexedBlocks || a.IndexedEntries == 0 {
			return fmt.Errorf("running router %d entries / %d blocks, replay %d / %d", a.IndexedEntries, a.IndexedBlocks, b.IndexedEntries, b.IndexedBlocks)
		}
		return nil
	}
	// The index equal to a replay, or the difference counted as lost.
	deadline := time.Now().Add(time.Minute)
	for cond() != nil && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(250 * time.Millisecond)
	}
	row.converge = time.Since(recovered)
	if a == nil || b == nil {
		t.Fatal("no router stats")
	}
	t.Logf("running router: %d entries, %d blocks, %d applied, %d gaps; replay: %d entries, %d blocks, %d applied, %d gaps",
		a.IndexedEntries, a.IndexedBlocks, a.EventsApplied, a.EventsGap, b.IndexedEntries, b.IndexedBlocks, b.EventsApplied, b.EventsGap)
	row.eventsLost = int(b.EventsGap) + int(max(a.IndexedEntries, b.IndexedEntries)-min(a.IndexedEntries, b.IndexedEntries))
	if row.eventsLost != 0 || row.succeeded != row.tried {
		row.failed = fmt.Sprintf("%d events lost, %d of %d requests after recovery succeeded", row.eventsLost, row.succeeded, row.tried)
	}
	return row
}

// down runs `compose down -v` and checks that the engine keeps no
// container, network or volume of the project.
func (s *stack) down(ctx context.Context) {
	t := s.t
	if _, err := s.run(ctx, "down", "-v", "--timeout", "10"); err != nil {
		t.Fatal(err)
	}
	label := "label=com.docker.compose.project=" + s.project
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		out, err := s.e.run(ctx, append(kind, "--filter", label)...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "" {
			t.Errorf("after down -v, docker %s lists %q", strings.Join(kind, " "), out)
		}
	}
}

// chatBody is a short chat of one user message.
func chatBody(prompt string, maxTokens int) string {
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	return string(b)
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// chat posts a chat completion and checks it has an answer.
func chat(ctx context.Context, base, body string) error {
	_, err := chatHeader(ctx, base, body)
	return err
}

// chatHeader is chat, returning the response's header.
func chatHeader(ctx context.Context, base, body string) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	// The model reasons first: a short answer may be reasoning only.
	var out struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				Reasoning string `json:"reasoning_content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) == 0 || out.Choices[0].Message.Content+out.Choices[0].Message.Reasoning == "" {
		return nil, fmt.Errorf("no answer in %s (%v)", raw, err)
	}
	return resp.Header, nil
}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return string(b), err
}
