package adapter

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeBatchDepthLimit: a payload nested maxDepth+1 arrays deep (the
// payload, its events, an event and what that event carries) decodes; one
// level more is ErrMalformed, "nested too deep".
func TestDecodeBatchDepthLimit(t *testing.T) {
	nested := func(levels int) any {
		var v any = []any{}
		for range levels - 1 {
			v = []any{v}
		}
		return v
	}
	// The payload, the events list and the event are three levels.
	for _, tc := range []struct {
		levels int
		ok     bool
	}{{maxDepth + 1, true}, {maxDepth + 2, false}} {
		_, err := DecodeBatch(pack(t, []any{0.0, []any{[]any{"BlockRemoved", []any{1}, nil, nested(tc.levels - 3)}}}))
		if tc.ok && err != nil {
			t.Fatalf("%d levels: %v; want it decoded", tc.levels, err)
		}
		if !tc.ok && (!errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "nested too deep")) {
			t.Fatalf("%d levels: %v; want ErrMalformed, nested too deep", tc.levels, err)
		}
	}
}

// TestSSEEventLimit: an event's data may reach maxSSEEvent bytes (its lines
// joined with newlines); one that would pass it is errSSEEventTooLarge, so
// that a broken engine cannot make the adapter buffer without end.
func TestSSEEventLimit(t *testing.T) {
	for _, tc := range []struct {
		line int // bytes of data on each of two lines
		err  error
	}{{maxSSEEvent/2 - 1, nil}, {maxSSEEvent / 2, errSSEEventTooLarge}} {
		l := "data: " + strings.Repeat("x", tc.line) + "\n"
		ev, err := newSSEReader(strings.NewReader(l + l + "\n")).Next()
		if !errors.Is(err, tc.err) {
			t.Fatalf("two lines of %d bytes: %v; want %v", tc.line, err, tc.err)
		}
		if err == nil && len(ev.Data) != 2*tc.line+1 {
			t.Fatalf("two lines of %d bytes: %d bytes of data", tc.line, len(ev.Data))
		}
	}
}
