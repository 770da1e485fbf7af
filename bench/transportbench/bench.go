// Package transportbench is the benchmark behind transport-bench: it
// compares Switchyard's request planes (tcp, http, nats) with a bare
// loopback TCP echo (the floor) and a gRPC server-streaming call, all in one
// process with the same payloads, and prints one table.
package transportbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// system is one thing under test: something that sends a request and
// receives n responses of size bytes each.
type system interface {
	name() string
	// stream sends req (whose first 8 bytes say n and size) and reads the
	// n responses to the end.
	stream(ctx context.Context, req []byte) (int, error)
	close()
}

// request encodes a request of reqSize bytes asking for n responses of size
// bytes.
func request(reqSize, n, size int) []byte {
	b := make([]byte, max(reqSize, 8))
	binary.BigEndian.PutUint32(b, uint32(n))
	binary.BigEndian.PutUint32(b[4:], uint32(size))
	return b
}

// parseRequest decodes what request encoded.
func parseRequest(b []byte) (n, size int) {
	if len(b) < 8 {
		return 0, 0
	}
	return int(binary.BigEndian.Uint32(b)), int(binary.BigEndian.Uint32(b[4:]))
}

type result struct {
	p50one, p99one time.Duration
	p50hun, p99hun time.Duration
	fps1, fps64    float64
}

// rounds is how many slices each latency row is cut into. The systems take
// turns slice by slice, so that the shared machine's drift (other tenants,
// frequency changes) lands on every column alike instead of on whichever
// system happened to run during a slow second.
const rounds = 20

// latencies measures one latency row for every system: iters calls each,
// interleaved in rounds, after a warm-up. It returns p50 and p99 per system.
func latencies(ctx context.Context, systems []system, req []byte, want, iters int) (p50, p99 []time.Duration, err error) {
	samples := make([][]time.Duration, len(systems))
	for i, s := range systems {
		for range min(iters/10+1, 200) { // warm up pools and connections
			if _, err := s.stream(ctx, req); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", s.name(), err)
			}
		}
		samples[i] = make([]time.Duration, 0, iters)
	}
	per := max(iters/rounds, 1)
	for r := 0; r*per < iters; r++ {
		for i, s := range systems {
			for range min(per, iters-r*per) {
				t0 := time.Now()
				n, err := s.stream(ctx, req)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %w", s.name(), err)
				}
				if n != want {
					return nil, nil, fmt.Errorf("%s: got %d responses, want %d", s.name(), n, want)
				}
				samples[i] = append(samples[i], time.Since(t0))
			}
		}
	}
	for _, d := range samples {
		slices.Sort(d)
		p50 = append(p50, d[len(d)/2])
		p99 = append(p99, d[len(d)*99/100])
	}
	return p50, p99, nil
}

func throughput(ctx context.Context, s system, conc, frames int, dur time.Duration) (float64, error) {
	req := request(8, frames, 64)
	var total atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				n, err := s.stream(ctx, req)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				total.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(t0).Seconds(), firstErr
}

// measure fills every system's result: the latency rows interleaved across
// systems, then the throughput rows one system at a time (concurrent load
// from two systems at once would measure neither).
func measure(ctx context.Context, systems []system, iters int, dur time.Duration, frames int) ([]result, error) {
	results := make([]result, len(systems))
	p50, p99, err := latencies(ctx, systems, request(1024, 1, 1024), 1, iters)
	if err != nil {
		return nil, fmt.Errorf("1->1: %w", err)
	}
	for i := range results {
		results[i].p50one, results[i].p99one = p50[i], p99[i]
	}
	if p50, p99, err = latencies(ctx, systems, request(1024, 100, 64), 100, max(iters/2, 1)); err != nil {
		return nil, fmt.Errorf("1->100: %w", err)
	}
	for i := range results {
		results[i].p50hun, results[i].p99hun = p50[i], p99[i]
	}
	for i, s := range systems {
		r := &results[i]
		if r.fps1, err = throughput(ctx, s, 1, frames, dur); err != nil {
			return nil, fmt.Errorf("%s frames c=1: %w", s.name(), err)
		}
		if r.fps64, err = throughput(ctx, s, 64, frames, dur); err != nil {
			return nil, fmt.Errorf("%s frames c=64: %w", s.name(), err)
		}
	}
	return results, nil
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)) }

func fps(f float64) string { return fmt.Sprintf("%.0f", f) }

// Run starts every system, measures each (iters calls per latency row, dur
// per frames-per-second row, frames responses per call in those rows) and
// writes the table to out.
func Run(ctx context.Context, out io.Writer, iters int, dur time.Duration, frames int) error {
	builders := []func() (system, error){startFloor, startTCP, startHTTP, startNATS, startGRPC}
	var systems []system
	defer func() {
		for _, s := range systems {
			s.close()
		}
	}()
	for _, b := range builders {
		s, err := b()
		if err != nil {
			return err
		}
		systems = append(systems, s)
	}
	results, err := measure(ctx, systems, iters, dur, frames)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, s := range systems {
		fmt.Fprintf(tw, "%s\t", s.name())
	}
	fmt.Fprintln(tw)
	rows := []struct {
		label string
		cell  func(result) string
	}{
		{"1 KiB -> 1 response, p50", func(r result) string { return us(r.p50one) }},
		{"1 KiB -> 1 response, p99", func(r result) string { return us(r.p99one) }},
		{"1 -> 100 x 64 B, p50 to last", func(r result) string { return us(r.p50hun) }},
		{"1 -> 100 x 64 B, p99 to last", func(r result) string { return us(r.p99hun) }},
		{"frames/s, concurrency 1", func(r result) string { return fps(r.fps1) }},
		{"frames/s, concurrency 64", func(r result) string { return fps(r.fps64) }},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t", row.label)
		for _, r := range results {
			fmt.Fprintf(tw, "%s\t", row.cell(r))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	idx := func(name string) result {
		for i, s := range systems {
			if s.name() == name {
				return results[i]
			}
		}
		return result{}
	}
	floor, tcp, grpc := idx("floor"), idx("tcp"), idx("grpc")
	ahead := tcp.p50one < grpc.p50one && tcp.p99one < grpc.p99one && tcp.p50hun < grpc.p50hun &&
		tcp.p99hun < grpc.p99hun && tcp.fps1 > grpc.fps1 && tcp.fps64 > grpc.fps64
	fmt.Fprintf(out, "\ntargets: tcp p50 1->1 = %.2fx floor (want <= 1.5x); tcp ahead of grpc on every row: %v; tcp frames/s at c=64 = %.0f (want >= 500000)\n",
		float64(tcp.p50one)/float64(floor.p50one), ahead, tcp.fps64)
	fmt.Fprintf(out, "settings: %d calls per latency row (1->100: %d), interleaved across systems in %d rounds; %v per frames/s row, %d x 64 B responses per call in frames/s rows\n",
		iters, max(iters/2, 1), rounds, dur, frames)
	return nil
}
