package testlog

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRingKeepsTheLatestLines(t *testing.T) {
	cases := []struct {
		name  string
		limit int
		lines []string
		want  string
	}{
		{"under the limit", 100, []string{"a\n", "b\n"}, "a\nb\n"},
		{"at the limit", 4, []string{"a\n", "b\n"}, "a\nb\n"},
		{"over: whole lines dropped", 5, []string{"aa\n", "bb\n", "c\n"}, "[earlier records dropped]\nbb\nc\n"},
		{"one line longer than the limit", 3, []string{"abcdef"}, "[earlier records dropped]\ndef"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &ring{limit: tc.limit}
			for _, l := range tc.lines {
				if n, err := r.Write([]byte(l)); n != len(l) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", l, n, err)
				}
			}
			if got := r.String(); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// recorder is a testing.TB that records Logf and can be failed.
type recorder struct {
	testing.TB
	failed   bool
	logged   []string
	cleanups []func()
}

func (r *recorder) Helper()          {}
func (r *recorder) Failed() bool     { return r.failed }
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Logf(format string, args ...any) {
	r.logged = append(r.logged, fmt.Sprintf(format, args...))
}
func (r *recorder) finish() {
	for _, f := range r.cleanups {
		f()
	}
}

func TestOnFailure(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprint("failed=", failed), func(t *testing.T) {
			r := &recorder{TB: t, failed: failed}
			log := OnFailure(r, slog.LevelWarn)
			log.Info("quiet")
			log.Warn("lease keep-alive failed", "err", "etcd down")
			r.finish()
			if !failed {
				if len(r.logged) != 0 {
					t.Fatalf("a passing test logged %q", r.logged)
				}
				return
			}
			if len(r.logged) != 1 || !strings.Contains(r.logged[0], "lease keep-alive failed") || strings.Contains(r.logged[0], "quiet") {
				t.Fatalf("logged %q, want the warning alone", r.logged)
			}
		})
	}
}
