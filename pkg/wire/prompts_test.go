package wire

import (
	"math"
	"testing"
)

func TestComputedPromptBucket(t *testing.T) {
	tests := []struct {
		tokens int
		want   int
	}{
		{0, 0},
		{255, 0},
		{256, 1},
		{361, 1}, // 256*sqrt(2) = 362.04
		{362, 1}, // still below the bound
		{363, 2}, // past it
		{512, 3}, // 256*2^(2/2) = 512 is bucket 2's bound, exclusive
		{20000, 13},
		{131071, 18},
		{131072, 19},
		{1 << 30, ComputedPromptBuckets - 1},
	}
	for _, tc := range tests {
		if got := ComputedPromptBucket(tc.tokens); got != tc.want {
			t.Errorf("ComputedPromptBucket(%d) = %d, want %d", tc.tokens, got, tc.want)
		}
	}
	for i := range ComputedPromptBuckets - 1 {
		// Every bucket holds its lower bound and not its upper one.
		hi := ComputedPromptBound(i)
		if got := ComputedPromptBucket(int(math.Ceil(hi)) - 1); got != i {
			t.Errorf("just below bucket %d's bound %.1f: bucket %d", i, hi, got)
		}
		if got := ComputedPromptBucket(int(math.Ceil(hi))); got != i+1 {
			t.Errorf("at bucket %d's bound %.1f: bucket %d, want %d", i, hi, got, i+1)
		}
	}
	if !math.IsInf(ComputedPromptBound(ComputedPromptBuckets-1), 1) {
		t.Error("the last bucket is bounded")
	}
}
