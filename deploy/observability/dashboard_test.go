package observability

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricName = regexp.MustCompile(`\bswitchyard_[a-z0-9_]+`)

// queried returns every metric the dashboard's panels query, histogram
// series reduced to their family name, with the panels that use it.
func queried(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					m = strings.TrimSuffix(m, suffix)
				}
				out[m] = append(out[m], p.Title)
			}
		}
	}
	return out
}

// served scrapes every component and returns the metric families present.
func served(t *testing.T, urls map[string]string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for name, url := range urls {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("scrape %s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
				out[strings.Fields(f)[0]] = true
			}
		}
	}
	return out
}

// TestEveryPanelMetricIsServed runs a stack with every /metrics endpoint,
// sends a few requests, and checks that each metric the dashboard queries
// exists on some component (a panel of a metric nobody serves shows
// nothing, which no one notices until they need it).
func TestEveryPanelMetricIsServed(t *testing.T) {
	want := queried(t)
	if len(want) < 20 {
		t.Fatalf("the dashboard queries only %d metrics", len(want))
	}
	s := stacktest.Start(t, stacktest.Options{Metrics: true})
	for i := range 4 {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"stream":true,"messages":[{"role":"user","content":"dashboard request %d with a prompt long enough to fill a block or two of sixteen tokens"}]}`, stacktest.Model, i%2)
		resp, err := http.Post(s.FrontendURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d", resp.StatusCode)
		}
	}
	// Some families appear only once something reached their component
	// after the answers did (the router's per-worker gauges, once the
	// workers' KV events came through the eventbus): scrape until every
	// metric is there, for a bounded time.
	testwait.UntilNil(t, 30*time.Second, "every metric the dashboard queries", func() error {
		have := served(t, s.MetricsURLs)
		var missing []string
		for m, panels := range want {
			if !have[m] {
				missing = append(missing, fmt.Sprintf("%s (panel %q)", m, panels[0]))
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("%d are not served:\n  %s", len(missing), strings.Join(missing, "\n  "))
		}
		return nil
	})
}

// TestScrapeConfigCoversTheComposeServices: every service of the compose
// file that serves metrics is a scrape target.
func TestScrapeConfigCoversTheComposeServices(t *testing.T) {
	cfg, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"registry:9101", "eventbus:9102", "router:9103", "frontend:8000", "mocker-1:9104", "mocker-2:9104"} {
		if !strings.Contains(string(cfg), `"`+target+`"`) {
			t.Errorf("prometheus.yml does not scrape %s", target)
		}
	}
}
