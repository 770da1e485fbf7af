package wire

import "math"

// ComputedPromptBuckets is the number of buckets of
// LoadMetrics.computed_prompt_requests_total: requests counted by the
// prompt tokens their engine computed (the prompt less the part served
// from its prefix cache). Bucket 0 counts those that computed fewer than
// 256 tokens; bucket i, 0 < i < ComputedPromptBuckets-1, those that
// computed at least ComputedPromptBound(i-1) and fewer than
// ComputedPromptBound(i) = 256*2^(i/2) tokens (a factor of sqrt(2) a
// bucket, to 131,072 at bucket 18); the last bucket all others.
const ComputedPromptBuckets = 20

// ComputedPromptBound is the upper bound, exclusive, of bucket i's
// computed prompt tokens: 256*2^(i/2), +Inf for the last bucket.
func ComputedPromptBound(i int) float64 {
	if i >= ComputedPromptBuckets-1 {
		return math.Inf(1)
	}
	return 256 * math.Pow(2, float64(i)/2)
}

// ComputedPromptBucket is the bucket of a request that computed tokens
// prompt tokens.
func ComputedPromptBucket(tokens int) int {
	for i := range ComputedPromptBuckets - 1 {
		if float64(tokens) < ComputedPromptBound(i) {
			return i
		}
	}
	return ComputedPromptBuckets - 1
}
