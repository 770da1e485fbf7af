package frontend_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/services/frontend"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

// TestStatusShowsPoolsAndRoles: with a prefill and a decode mocker, the
// status report counts the model's pools by role and names each worker's
// role, and the page's first render says the same.
func TestStatusShowsPoolsAndRoles(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, stacktest.Options{Mockers: 2, MockerModes: []string{"prefill", "decode"}})
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
	if d := cmp.Diff([]registryclient.Pool{{Model: stacktest.Model, Prefill: 1, Decode: 1}}, rep.Pools); d != "" {
		t.Fatalf("pools (-want +got):\n%s", d)
	}
	roles := map[string]string{}
	for _, w := range rep.Workers {
		roles[w.ID] = w.Role
	}
	want := map[string]string{fmt.Sprintf("%x", s.Mockers[0].InstanceID()): "prefill", fmt.Sprintf("%x", s.Mockers[1].InstanceID()): "decode"}
	if d := cmp.Diff(want, roles); d != "" {
		t.Fatalf("worker roles (-want +got):\n%s", d)
	}
	page, err := http.Get(s.FrontendURL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(page.Body)
	page.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`data-role="prefill"`, `data-role="decode"`, stacktest.Model + ": prefill 1, decode 1"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("the status page lacks %q", w)
		}
	}
}
