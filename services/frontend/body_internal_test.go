package frontend

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// unread is a body that fails the test if anything reads it.
type unread struct{ t *testing.T }

func (u unread) Read([]byte) (int, error) {
	u.t.Error("a body whose Content-Length is over the limit was read")
	return 0, io.EOF
}

// TestReadBodyLimit checks the body limit on both paths at a small limit: a
// declared length over it is refused unread, a chunked body (length
// unknown) is refused once it passes it, and a body at the limit is read
// whole.
func TestReadBodyLimit(t *testing.T) {
	const limit = 1024
	cases := []struct {
		name     string
		body     func(t *testing.T) io.Reader
		length   int64 // Content-Length; -1 is chunked
		tooLarge bool
		want     int // bytes read when not too large
	}{
		{"declared over the limit, never read", func(t *testing.T) io.Reader { return unread{t} }, limit + 1, true, 0},
		{"declared at the limit", func(*testing.T) io.Reader { return strings.NewReader(strings.Repeat("a", limit)) }, limit, false, limit},
		{"chunked over the limit", func(*testing.T) io.Reader { return strings.NewReader(strings.Repeat("a", 2*limit)) }, -1, true, 0},
		{"chunked at the limit", func(*testing.T) io.Reader { return strings.NewReader(strings.Repeat("a", limit)) }, -1, false, limit},
		{"empty", func(*testing.T) io.Reader { return strings.NewReader("") }, 0, false, 0},
	}
	s := &Service{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", tc.body(t))
			r.ContentLength = tc.length
			w := httptest.NewRecorder()
			b, err := s.readBodyWithin(r, w, http.NewResponseController(w), limit)
			if tc.tooLarge {
				if !errors.Is(err, errTooLarge) {
					t.Fatalf("got %d bytes, %v; want errTooLarge", len(b), err)
				}
				return
			}
			if err != nil || len(b) != tc.want {
				t.Fatalf("got %d bytes, %v", len(b), err)
			}
		})
	}
}
