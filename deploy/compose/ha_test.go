package compose_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestComposeHA runs the file's cluster form (--profile ha: 3 etcd members,
// 3 NATS servers, 2 replicas of each service) and, under a client loop
// spread over both frontends, kills the etcd leader's container, one NATS
// server's, one router's and one frontend's. No request may fail beyond
// those in flight on the killed frontend; a request the killed frontend
// refuses to connect is sent to the other one, as a client with both
// addresses does.
func TestComposeHA(t *testing.T) {
	s := startStack(t, "ha")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	fronts := []string{"http://127.0.0.1:8001", "http://127.0.0.1:8002"}
	for _, f := range fronts {
		s.waitFor(ctx, f+" answers the README's curl", 4*time.Minute, func() error { return chat(ctx, f, readmeChat) })
	}

	var killedAt [2]atomic.Int64 // unix nanoseconds of each frontend's kill
	killedBefore := func(f int, t time.Time) bool {
		k := killedAt[f].Load()
		return k != 0 && t.UnixNano() >= k
	}
	var (
		mu       sync.Mutex
		tried    [2]int
		served   [2]int
		failures []string
		inflight [2]atomic.Int32
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f := (c + i) % 2
				for try := 0; try < 2; try++ {
					inflight[f].Add(1)
					sent := time.Now()
					err := chat(ctx, fronts[f], chatBody(fmt.Sprintf("client %d request %d", c, i), 4))
					inflight[f].Add(-1)
					// Refused, or (the engine's port proxy accepts and then
					// closes) cut before an answer on a frontend already
					// killed when the request was sent: the other frontend
					// takes it, as a client given both does.
					if err != nil && (errors.Is(err, syscall.ECONNREFUSED) || killedBefore(f, sent)) {
						f = 1 - f
						continue
					}
					mu.Lock()
					tried[f]++
					if err == nil {
						served[f]++
					} else {
						failures = append(failures, fmt.Sprintf("%s: %v", fronts[f], err))
					}
					mu.Unlock()
					break
				}
			}
		}()
	}

	leader, err := s.etcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows []faultRow
	var inflightAtKill int32
	for _, k := range []struct{ fault, service string }{
		{"kill the etcd leader (" + leader + ")", leader},
		{"kill nats-2", "nats-2"},
		{"kill router-a", "router-a"},
		{"kill frontend-a", "frontend-a"},
	} {
		mu.Lock()
		t0, s0, f0 := tried[0]+tried[1], served[0]+served[1], len(failures)
		mu.Unlock()
		if k.service == "frontend-a" {
			inflightAtKill = inflight[0].Load()
			killedAt[0].Store(time.Now().UnixNano())
		}
		start := time.Now()
		if _, err := s.run(ctx, "kill", k.service); err != nil {
			t.Fatal(err)
		}
		// The loop runs on for a while after each kill.
		select {
		case <-ctx.Done():
		case <-time.After(15 * time.Second):
		}
		mu.Lock()
		rows = append(rows, faultRow{fault: k.fault, duration: time.Since(start),
			tried: tried[0] + tried[1] - t0, succeeded: served[0] + served[1] - s0, eventsLost: 0,
			failed: strings.Join(failures[f0:], "; ")})
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	printRows(t, rows)
	if len(failures) > int(inflightAtKill) {
		t.Errorf("%d requests failed, %d were in flight on frontend-a when it was killed: %q", len(failures), inflightAtKill, failures)
	}
	s.down(ctx)
}

// etcdLeader asks the etcd cluster which member leads and returns its
// service name.
func (s *stack) etcdLeader(ctx context.Context) (string, error) {
	id, err := s.container(ctx, "etcd-1")
	if err != nil {
		return "", err
	}
	out, err := s.e.run(ctx, "exec", id, "etcdctl", "--endpoints=http://etcd-1:2379,http://etcd-2:2379,http://etcd-3:2379",
		"endpoint", "status", "-w", "json")
	if err != nil {
		return "", err
	}
	var st []struct {
		Endpoint string `json:"Endpoint"`
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Leader uint64 `json:"leader"`
		} `json:"Status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return "", fmt.Errorf("etcdctl endpoint status: %w: %s", err, out)
	}
	for _, e := range st {
		if e.Status.Header.MemberID == e.Status.Leader && e.Status.Leader != 0 {
			host := strings.TrimPrefix(e.Endpoint, "http://")
			host, _, _ = strings.Cut(host, ":")
			return host, nil
		}
	}
	return "", fmt.Errorf("no leader in %s", out)
}
