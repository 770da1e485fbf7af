package undo

import (
	"errors"
	"slices"
	"testing"
)

func TestOnError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want []int
	}{
		{name: "error unwinds in reverse", err: errors.New("boom"), want: []int{3, 2, 1}},
		{name: "success keeps everything", err: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			start := func() (err error) {
				var u Stack
				defer u.OnError(&err)
				for i := 1; i <= 3; i++ {
					u.Push(func() { got = append(got, i) })
				}
				return tt.err
			}
			if err := start(); !errors.Is(err, tt.err) {
				t.Fatalf("start = %v, want %v", err, tt.err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("released %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUnwindRunsOnce(t *testing.T) {
	var u Stack
	n := 0
	u.Push(func() { n++ })
	u.Unwind()
	u.Unwind()
	if n != 1 {
		t.Fatalf("release ran %d times, want 1", n)
	}
}
