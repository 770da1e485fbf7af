// Package fifo is a first-in first-out queue whose every operation does
// bounded work. The router keeps its expiry lists (requests in the order
// they were routed, freed ids, predictions) for minutes to half an hour: a
// slice with a head index that is compacted, or grown, copies the whole
// list at once, which at 1,000 decisions a second is megabytes copied in
// one decision, under its lock. Queue keeps its elements in fixed-size
// chunks instead: a push or pop touches one chunk, and the chunk list it
// copies now and then holds one pointer per chunkSize elements.
package fifo

// chunkSize is how many elements a chunk holds.
const chunkSize = 512

// Queue is a FIFO queue; its zero value is empty and ready to use. It is
// not safe for concurrent use.
type Queue[T any] struct {
	// chunks[first:] hold the elements, the first chunk's from off on;
	// every chunk but the last is full.
	chunks [][]T
	first  int
	off    int
	n      int
	// spare is a retired chunk kept for the next one needed.
	spare []T
}

// Len is the number of elements.
func (q *Queue[T]) Len() int { return q.n }

// Push adds v at the back.
func (q *Queue[T]) Push(v T) {
	if last := len(q.chunks) - 1; last < q.first || len(q.chunks[last]) == chunkSize {
		c := q.spare
		if c == nil {
			c = make([]T, 0, chunkSize)
		}
		q.spare = nil
		q.chunks = append(q.chunks, c)
	}
	last := len(q.chunks) - 1
	q.chunks[last] = append(q.chunks[last], v)
	q.n++
}

// Front returns the element at the front, to read or change in place; it
// must not be called on an empty queue.
func (q *Queue[T]) Front() *T { return &q.chunks[q.first][q.off] }

// Pop removes the element at the front and returns it; it must not be
// called on an empty queue.
func (q *Queue[T]) Pop() T {
	c := q.chunks[q.first]
	v := c[q.off]
	var zero T
	c[q.off] = zero // the queue no longer holds what v points to
	q.off++
	q.n--
	if q.off < len(c) {
		return v
	}
	q.off = 0
	if q.first == len(q.chunks)-1 {
		// The last chunk emptied: it takes the next pushes again.
		q.chunks[q.first] = c[:0]
		return v
	}
	q.spare = c[:0]
	q.chunks[q.first] = nil
	q.first++
	if q.first > 64 && q.first > len(q.chunks)/2 {
		n := copy(q.chunks, q.chunks[q.first:])
		clear(q.chunks[n:])
		q.chunks = q.chunks[:n]
		q.first = 0
	}
	return v
}
