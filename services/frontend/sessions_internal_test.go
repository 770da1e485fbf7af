package frontend

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/services/router/core"
)

func TestSessionHeaders(t *testing.T) {
	tests := []struct {
		name    string
		headers [][2]string
		want    string
		ok      bool
	}{
		{"none", nil, "", true},
		{"empty is none", [][2]string{{"X-Session-Id", ""}}, "", true},
		{"x-session-id", [][2]string{{"x-session-id", "conv-1"}}, "conv-1", true},
		{"dynamo's", [][2]string{{"X-Dynamo-Session-ID", "3f2b9c1e-8d4a-4b8e"}}, "3f2b9c1e-8d4a-4b8e", true},
		{"both, equal", [][2]string{{"X-Session-Id", "a"}, {"X-Dynamo-Session-Id", "a"}}, "a", true},
		{"both, different", [][2]string{{"X-Session-Id", "a"}, {"X-Dynamo-Session-Id", "b"}}, "", false},
		{"twice", [][2]string{{"X-Session-Id", "a"}, {"X-Session-Id", "a"}}, "", false},
		{"space", [][2]string{{"X-Session-Id", "a b"}}, "", false},
		{"control", [][2]string{{"X-Session-Id", "a\x01"}}, "", false},
		{"non-ascii", [][2]string{{"X-Session-Id", "café"}}, "", false},
		{"at the limit", [][2]string{{"X-Session-Id", strings.Repeat("s", core.MaxSessionIDLen)}}, strings.Repeat("s", core.MaxSessionIDLen), true},
		{"too long", [][2]string{{"X-Session-Id", strings.Repeat("s", core.MaxSessionIDLen+1)}}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, kv := range tt.headers {
				h.Add(kv[0], kv[1])
			}
			got, err := sessionOf(h)
			if tt.ok != (err == nil) || got != tt.want {
				t.Fatalf("sessionOf = %q, %v; want %q, ok %v", got, err, tt.want, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "session-id")) {
				t.Fatalf("error %v is not an invalid request naming the header", err)
			}
		})
	}
}

// FuzzSessionHeaders: any header value is taken exactly when the router
// would take it, and a refused one is a 400.
func FuzzSessionHeaders(f *testing.F) {
	for _, s := range []string{"", "a", "conv-1", "a b", "\xff", strings.Repeat("x", 300), "u@x.io/c:1+2=3~"} {
		f.Add(s, "")
		f.Add(s, s)
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		h := http.Header{}
		if a != "" {
			h["X-Session-Id"] = []string{a}
		}
		if b != "" {
			h["X-Dynamo-Session-Id"] = []string{b}
		}
		got, err := sessionOf(h)
		if err != nil {
			if code, _ := errorStatus(err); code != http.StatusBadRequest {
				t.Fatalf("%q, %q: status %d, want 400", a, b, code)
			}
			return
		}
		if got != "" && core.ValidSessionID(got) != nil {
			t.Fatalf("%q, %q: took %q, which the router refuses", a, b, got)
		}
		// Both headers name the same session when both are taken; an
		// empty one is none.
		want := a
		if want == "" {
			want = b
		}
		if got != want || (a != "" && b != "" && a != b) {
			t.Fatalf("%q, %q: took %q", a, b, got)
		}
	})
}

func TestWorkerName(t *testing.T) {
	for _, tc := range []struct {
		instance uint64
		rank     uint32
		want     string
	}{
		{0x694d9a4c3e2f1b07, 0, "694d9a4c3e2f1b07"},
		{0xa, 3, "a/3"},
	} {
		if got := workerName(tc.instance, tc.rank); got != tc.want {
			t.Errorf("workerName(%x, %d) = %q, want %q", tc.instance, tc.rank, got, tc.want)
		}
	}
}
