package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelaysStayWithinTheGrowingCap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        Policy
		min, max time.Duration
	}{
		{"defaults", Policy{}, DefaultMin, DefaultMax},
		{"custom", Policy{Min: 10 * time.Millisecond, Max: 300 * time.Millisecond}, 10 * time.Millisecond, 300 * time.Millisecond},
		{"max below min", Policy{Min: time.Second, Max: time.Millisecond}, time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.p)
			cap := tc.min
			for i := range 20 {
				d := b.Next()
				if d < tc.min || d > cap {
					t.Fatalf("attempt %d: delay %v outside [%v, %v]", i, d, tc.min, cap)
				}
				cap = min(cap*2, tc.max)
			}
			if !b.Failed() && tc.min != tc.max {
				t.Fatal("Failed is false after failures")
			}
			b.Reset()
			if d := b.Next(); d != tc.min {
				t.Fatalf("first delay after Reset = %v, want the floor %v", d, tc.min)
			}
		})
	}
}

// TestDelaysAreSpread is the reason the package exists: two loops that fail
// at the same instant must not retry at the same instant.
func TestDelaysAreSpread(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 64 {
		b := New(Policy{Min: time.Millisecond, Max: time.Second})
		for range 8 {
			b.Next()
		}
		seen[b.Next()] = true
	}
	if len(seen) < 32 {
		t.Fatalf("64 loops at the same attempt drew only %d distinct delays", len(seen))
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := New(Policy{Min: time.Hour, Max: time.Hour})
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context = %v", err)
	}
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Fatal(err)
	}
}
