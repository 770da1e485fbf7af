package frontend

import (
	"testing"
	"time"
)

func TestRecentWindow(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := newRecent()
	r.now = func() time.Time { return now }
	r.finished(1, 100*time.Millisecond, 32, 16, false)
	r.finished(2, 300*time.Millisecond, 32, 0, true)
	r.finished(0, 0, 8, 0, true) // failed before any worker
	if len(r.buckets) != 1 {
		t.Fatalf("%d buckets, want 1", len(r.buckets))
	}
	b := r.buckets[0]
	if b.requests != 3 || b.errs != 2 || b.ttftN != 2 || b.ttftMax != 300*time.Millisecond || b.routed[1] != 1 || b.routed[2] != 1 || len(b.routed) != 2 {
		t.Fatalf("bucket = %+v", b)
	}
	tests := []struct {
		advance time.Duration
		want    int
	}{
		{bucketWidth, 2},
		{bucketWidth, 3},
		{(windowBuckets - 3) * bucketWidth, 4}, // the first one is the oldest still in; quiet buckets are not kept
		{bucketWidth, 4},                       // it drops out as a new one starts
		{windowBuckets * bucketWidth, 1},       // a long quiet spell leaves only the new one
	}
	for i, tt := range tests {
		now = now.Add(tt.advance)
		r.finished(1, time.Millisecond, 1, 1, false)
		if len(r.buckets) != tt.want {
			t.Fatalf("step %d: %d buckets, want %d", i, len(r.buckets), tt.want)
		}
	}
}
