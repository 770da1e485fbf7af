package frontend_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// chromium finds Debian's headless browser. .ci/run installs it, so in CI
// (CI set) its absence fails the test; elsewhere the test is skipped.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium is not installed (apt-get install chromium); CI runs this test")
	return ""
}

// browse runs headless chromium on url with a fresh profile, letting the
// page's script run for a few seconds of virtual time, with extra flags
// (--dump-dom, --screenshot=...). It returns stdout.
func browse(t *testing.T, bin, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000"}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return string(out)
}

func TestStatusPageInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	s := stacktest.Start(t, stacktest.Options{})
	for i := range 3 {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"messages":[{"role":"user","content":"status page request %d"}]}`, stacktest.Model, i)
		resp, err := http.Post(s.FrontendURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d", resp.StatusCode)
		}
	}

	// The JSON the page reads.
	resp, err := http.Get(s.FrontendURL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep frontend.StatusReport
	err = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Workers) != 2 || rep.Requests != 3 || rep.TTFTAvgMillis <= 0 || !strings.HasPrefix(rep.RouterView, "router service") {
		t.Fatalf("status.json = %+v", rep)
	}
	routed := 0
	for _, w := range rep.Workers {
		routed += w.Routed
		if !w.HasRouter {
			t.Errorf("worker %s without the router's view", w.ID)
		}
	}
	if routed != 3 {
		t.Fatalf("%d routing decisions in the window, want 3", routed)
	}

	dom := browse(t, bin, s.FrontendURL+"/status", "--dump-dom")
	for _, w := range s.Mockers {
		id := fmt.Sprintf(`data-instance="%x"`, w.InstanceID())
		if !strings.Contains(dom, id) {
			t.Errorf("the page does not list mocker %x", w.InstanceID())
		}
	}
	// The script ran and refreshed the page from /status.json.
	if !strings.Contains(dom, `data-live="true"`) || !strings.Contains(dom, "updated ") {
		t.Errorf("the page's script did not refresh it:\n%s", dom)
	}
	shot := filepath.Join(t.TempDir(), "status.png")
	browse(t, bin, s.FrontendURL+"/status", "--screenshot="+shot, "--window-size=1280,800", "--hide-scrollbars")
	fi, err := os.Stat(shot)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("status page screenshot: %s (%d bytes)", shot, fi.Size())
	if dir := os.Getenv("SWITCHYARD_SCREENSHOT_DIR"); dir != "" {
		b, _ := os.ReadFile(shot)
		_ = os.WriteFile(filepath.Join(dir, "status.png"), b, 0o644)
	}
}

func TestStatusPageOff(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Mockers: 1, FrontendArgs: []string{"--no-status-page"}})
	for _, path := range []string{"/status", "/status.json"} {
		resp, err := http.Get(s.FrontendURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s with --no-status-page: %d, want 404", path, resp.StatusCode)
		}
	}
}
