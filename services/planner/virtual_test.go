package planner_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/services/ctl"
	"github.com/switchyard-llm/switchyard/services/planner"
	"github.com/switchyard-llm/switchyard/services/planner/core"
	"github.com/switchyard-llm/switchyard/services/stack/stacktest"
)

func startPlanner(t *testing.T, st *stacktest.Stack, args ...string) *planner.Service {
	t.Helper()
	var cfg planner.Config
	fs := flagSet(&cfg)
	if err := fs.Parse(append([]string{"--grpc-addr", "127.0.0.1:0", "--metrics-addr", "", "--status-addr", "",
		"--registry-addr", st.RegistryAddr, "--eventbus-addr", st.EventbusAddr}, args...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := planner.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := svc.Wait(); err != nil {
			t.Errorf("planner: %v", err)
		}
	})
	return svc
}

// flagSet is the planner's flags, bound to cfg.
func flagSet(cfg *planner.Config) *flag.FlagSet {
	fs := flag.NewFlagSet("planner", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	return fs
}

// TestVirtualConnectorWaitsForTheAcknowledgement runs the planner with the
// virtual connector over a pool of one worker and a minimum of two, so
// that every decision asks for one more worker. An external runner (the
// test) reads the decision from the registry and acknowledges its id: the
// planner decides nothing new until then, and once the acknowledgement
// timeout passes without one.
func TestVirtualConnectorWaitsForTheAcknowledgement(t *testing.T) {
	st := stacktest.Start(t, stacktest.Options{Mockers: 1, NoFrontend: true})
	svc := startPlanner(t, st, "--connector", "virtual", "--min-replicas", "2", "--max-replicas", "4",
		"--adjustment-interval", "100ms", "--ack-timeout", "2s")
	dc, err := registryclient.Dial([]string{st.RegistryAddr}, registryclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ctx := context.Background()
	stored := func() core.Decision {
		r, err := dc.Raw().GetKey(ctx, &registryv1.GetKeyRequest{Bucket: planner.Bucket, Key: planner.DecisionKey})
		if err != nil {
			return core.Decision{}
		}
		d, err := core.DecodeDecision(r.GetKv().GetValue())
		if err != nil {
			t.Fatalf("stored decision: %v", err)
		}
		return d
	}
	waiting := func() string { return svc.Status().Waiting }

	// The first decision wants 2 workers, and waits.
	var first core.Decision
	testwait.Until(t, 20*time.Second, "a first decision", func() bool { first = stored(); return first.ID != 0 })
	if p := first.Pools; len(p) != 1 || p[0].Current != 1 || p[0].Target != 2 || p[0].Model != stacktest.Model || p[0].Role != core.Agg {
		t.Fatalf("first decision %+v; want the agg pool of %s from 1 to 2", first, stacktest.Model)
	}
	testwait.Until(t, 10*time.Second, "the planner waiting for the acknowledgement", func() bool { return strings.Contains(waiting(), fmt.Sprint(first.ID)) })
	// switchyard status shows it.
	gathered, err := ctl.Gather(ctx, ctl.Config{RegistryAddr: st.RegistryAddr, EventbusAddr: st.EventbusAddr, Timeout: 5 * time.Second})
	if err != nil || gathered.Planner == nil || gathered.Planner.ID != first.ID || gathered.Planner.Pools[0].Target != 2 {
		t.Fatalf("switchyard status: %+v, %v", gathered, err)
	}
	if d := stored(); d.ID != first.ID {
		t.Fatalf("decided %d before %d was acknowledged", d.ID, first.ID)
	}

	// The runner acknowledges: the planner decides again, and waits again.
	if _, err := dc.Raw().PutKey(ctx, &registryv1.PutKeyRequest{Bucket: planner.Bucket, Key: planner.AckKey, Value: []byte(fmt.Sprint(first.ID))}); err != nil {
		t.Fatal(err)
	}
	var second core.Decision
	testwait.Until(t, 10*time.Second, "a decision after the acknowledgement", func() bool { second = stored(); return second.ID > first.ID })
	if second.ID != first.ID+1 {
		t.Fatalf("after the acknowledgement of %d came %d", first.ID, second.ID)
	}

	// Without an acknowledgement, the timeout lets the planner decide.
	testwait.Until(t, 20*time.Second, "a decision after the acknowledgement timeout", func() bool { return stored().ID > second.ID })

	// A garbled acknowledgement acknowledges nothing (the timeout still
	// applies).
	if _, err := dc.Raw().PutKey(ctx, &registryv1.PutKeyRequest{Bucket: planner.Bucket, Key: planner.AckKey, Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	third := stored()
	testwait.Until(t, 10*time.Second, "waiting on a garbled acknowledgement", func() bool { return strings.Contains(waiting(), fmt.Sprint(third.ID)) })
}

// TestRestartRestoresTheRates starts a planner over a registry that holds
// a stopped planner's last decisions: it takes back the rates they
// observed when the newest is recent (a restart at once), and learns them
// afresh after a longer gap.
func TestRestartRestoresTheRates(t *testing.T) {
	for _, tc := range []struct {
		name string
		ago  time.Duration // the newest decision's age
		want int
	}{
		{"recent", 2 * time.Second, 3},
		{"after a gap", time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := stacktest.Start(t, stacktest.Options{NoFrontend: true})
			dc, err := registryclient.Dial([]string{st.RegistryAddr}, registryclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer dc.Close()
			ctx := context.Background()
			if _, err := dc.Raw().CreateBucket(ctx, &registryv1.CreateBucketRequest{Bucket: planner.Bucket}); err != nil {
				t.Fatal(err)
			}
			newest := time.Now().Add(-tc.ago)
			for i := range 3 {
				id := uint64(i + 1)
				d := core.Decision{ID: id, At: newest.Add(time.Duration(i-2) * time.Second), Pools: []core.PoolDecision{{
					PoolKey: core.PoolKey{Model: "m", Role: core.Agg}, Current: 2, Target: 2, Reason: "throughput",
					Inputs: core.Inputs{Observed: core.Demand{RequestsPerSec: 5, PromptTokensPerSec: 500, OutputTokensPerSec: 50}, Workers: 2, Fresh: 2}}}}
				b, err := d.Encode()
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range []string{planner.HistoryKey(id), planner.DecisionKey} {
					if _, err := dc.Raw().PutKey(ctx, &registryv1.PutKeyRequest{Bucket: planner.Bucket, Key: key, Value: b}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Decisions at most 30 s old (three intervals) are recent.
			svc := startPlanner(t, st, "--adjustment-interval", "10s")
			if got := svc.Status().RestoredSamples; got != tc.want {
				t.Fatalf("restored %d samples, want %d", got, tc.want)
			}
		})
	}
}
