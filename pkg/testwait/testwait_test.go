package testwait

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// As a child of TestAtLeastParallel: apply AtLeastParallel to this
	// binary's own command line and print what -test.parallel became.
	if probe := os.Getenv(probeEnv); probe != "" {
		n, err := strconv.Atoi(probe)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		AtLeastParallel(n)
		fmt.Println(flag.Lookup("test.parallel").Value.String())
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

const probeEnv = "TESTWAIT_PARALLEL_PROBE"

func TestAtLeastParallel(t *testing.T) {
	def := runtime.GOMAXPROCS(0) // -test.parallel's default
	for _, tt := range []struct {
		name string
		n    int
		args []string
		want int
	}{
		{"raised to n", def + 6, nil, def + 6},
		{"never lowered", 1, nil, def},
		{"the command line wins over a higher n", def + 6, []string{"-test.parallel=1"}, 1},
		{"the command line wins over a lower n", 1, []string{"-test.parallel=" + strconv.Itoa(def+3)}, def + 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, tt.args...)...)
			cmd.Env = append(os.Environ(), probeEnv+"="+strconv.Itoa(tt.n))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("probe: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != strconv.Itoa(tt.want) {
				t.Errorf("-test.parallel = %s; want %d", got, tt.want)
			}
		})
	}
}

// recorder is a testing.TB that records a Fatalf instead of stopping the
// goroutine, so that Until's failure can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUntil(t *testing.T) {
	for _, tt := range []struct {
		name      string
		holdAfter int32 // checks before cond holds; -1: never
		d         time.Duration
		fail      string
	}{
		{"holds at once", 0, time.Second, ""},
		{"holds after some checks", 3, time.Minute, ""},
		{"never holds", -1, 3 * Interval, "timed out after 30ms waiting for the thing"},
		{"no time at all, holds at once", 0, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var checks atomic.Int32
			r := &recorder{TB: t}
			Until(r, tt.d, "the thing", func() bool {
				n := checks.Add(1)
				return tt.holdAfter >= 0 && n > tt.holdAfter
			})
			if r.failed != tt.fail {
				t.Errorf("failure %q, want %q", r.failed, tt.fail)
			}
			if tt.holdAfter >= 0 && checks.Load() != tt.holdAfter+1 {
				t.Errorf("%d checks, want %d (stop at the first that holds)", checks.Load(), tt.holdAfter+1)
			}
			if tt.fail != "" && !strings.Contains(r.failed, "the thing") {
				t.Errorf("failure %q does not name the condition", r.failed)
			}
		})
	}
}

func TestUntilNil(t *testing.T) {
	for _, tt := range []struct {
		name      string
		holdAfter int32 // checks before cond holds; -1: never
		d         time.Duration
		fail      string
	}{
		{"holds at once", 0, time.Second, ""},
		{"holds after some checks", 3, time.Minute, ""},
		{"never holds: the last error", -1, 3 * Interval, "timed out after 30ms waiting for the thing: check %d"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var checks atomic.Int32
			r := &recorder{TB: t}
			UntilNil(r, tt.d, "the thing", func() error {
				n := checks.Add(1)
				if tt.holdAfter >= 0 && n > tt.holdAfter {
					return nil
				}
				return fmt.Errorf("check %d", n)
			})
			want := tt.fail
			if want != "" {
				want = fmt.Sprintf(want, checks.Load()) // the last check's error
			}
			if r.failed != want {
				t.Errorf("failure %q, want %q", r.failed, want)
			}
			if tt.holdAfter >= 0 && checks.Load() != tt.holdAfter+1 {
				t.Errorf("%d checks, want %d (stop at the first that holds)", checks.Load(), tt.holdAfter+1)
			}
		})
	}
}
