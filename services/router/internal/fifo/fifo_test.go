package fifo

import (
	"math/rand/v2"
	"testing"
)

// TestQueueMatchesSlice runs random pushes and pops, in bursts long enough
// to span many chunks, against a plain slice.
func TestQueueMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q Queue[int]
	var want []int
	next := 0
	// Each step pushes or pops a burst of up to three chunks, so even the
	// short form crosses chunk boundaries thousands of times.
	steps := 20_000
	if testing.Short() {
		steps = 2_000
	}
	for step := range steps {
		burst := rng.IntN(3 * chunkSize)
		if rng.IntN(2) == 0 {
			for range burst {
				q.Push(next)
				want = append(want, next)
				next++
			}
		} else {
			for range burst {
				if len(want) == 0 {
					break
				}
				if got := *q.Front(); got != want[0] {
					t.Fatalf("step %d: front %d, want %d", step, got, want[0])
				}
				if got := q.Pop(); got != want[0] {
					t.Fatalf("step %d: pop %d, want %d", step, got, want[0])
				}
				want = want[1:]
			}
		}
		if q.Len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, q.Len(), len(want))
		}
	}
}

// TestQueueFrontInPlace checks that Front's element is the queue's.
func TestQueueFrontInPlace(t *testing.T) {
	var q Queue[int]
	q.Push(1)
	q.Push(2)
	*q.Front() = 10
	if got := q.Pop(); got != 10 {
		t.Fatalf("pop %d after changing the front, want 10", got)
	}
	if got := q.Pop(); got != 2 {
		t.Fatalf("pop %d, want 2", got)
	}
	if q.Len() != 0 {
		t.Fatalf("len %d, want 0", q.Len())
	}
}

// TestQueueChunksBounded checks that a queue of steady length keeps a
// bounded chunk list however many elements pass through it.
func TestQueueChunksBounded(t *testing.T) {
	var q Queue[int]
	for i := range 100 * chunkSize {
		q.Push(i)
		if q.Len() > 10*chunkSize {
			q.Pop()
		}
	}
	if n := len(q.chunks); n > 2*(10+1)+64+2 {
		t.Fatalf("%d chunks for %d elements", n, q.Len())
	}
}
