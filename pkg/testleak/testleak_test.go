package testleak

import (
	"strings"
	"testing"
	"time"
)

// blockedUntil runs until release is closed; a named function, so that a
// leak report can be checked for it.
func blockedUntil(release <-chan struct{}, done chan<- struct{}) {
	<-release
	close(done)
}

// TestFindWaitsForGoroutinesThatEnd: a goroutine that ends within the
// settle time is not reported; one still running after it is, by name.
func TestFindWaitsForGoroutinesThatEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endsAfter time.Duration // 0: not before find returns
		settle    time.Duration
		wantLeak  bool
	}{
		{"ends within the settle time", 300 * time.Millisecond, 5 * time.Second, false},
		{"still running after it", 0, 300 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release, done := make(chan struct{}), make(chan struct{})
			go blockedUntil(release, done)
			var timer *time.Timer
			if tc.endsAfter > 0 {
				timer = time.AfterFunc(tc.endsAfter, func() { close(release) })
			}
			err := find(tc.settle)
			if timer == nil {
				close(release)
			}
			<-done
			if tc.wantLeak != (err != nil) || (err != nil && !strings.Contains(err.Error(), "blockedUntil")) {
				t.Fatalf("find = %v; want a leak named blockedUntil: %v", err, tc.wantLeak)
			}
			if err := find(5 * time.Second); err != nil {
				t.Fatalf("after the goroutine ended: %v", err)
			}
		})
	}
}
