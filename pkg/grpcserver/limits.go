package grpcserver

import (
	"context"
	"errors"
	"flag"
	"net"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Limits bound what one client may hold open or send, so that one careless
// or hostile client cannot exhaust a server shared by the whole fleet.
type Limits struct {
	// MaxConcurrentStreams is the most calls one connection may have open
	// at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize is the largest request message accepted, in bytes;
	// 0 keeps gRPC's 4 MiB, and a service may raise it for its own needs.
	MaxRecvMsgSize int
	// MaxWatchesPerClient is the most long-lived watch or subscribe streams
	// one client (its token, else its IP address) may hold at once; 0 is no
	// limit.
	MaxWatchesPerClient int
}

// DefaultLimits are the flags' defaults.
var DefaultLimits = Limits{MaxConcurrentStreams: 1000, MaxWatchesPerClient: 256}

// RegisterFlags adds the limit flags.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("max-concurrent-streams", "most calls one connection may have open at once (default 1000)", func(s string) error {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil || v == 0 {
			return errors.New("want a positive number")
		}
		l.MaxConcurrentStreams = uint32(v)
		return nil
	})
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = DefaultLimits.MaxConcurrentStreams
	}
	fs.IntVar(&l.MaxWatchesPerClient, "max-watches-per-client", DefaultLimits.MaxWatchesPerClient, "most watch/subscribe streams one client (token, else IP address) may hold open (0: no limit)")
}

// Validate checks the limits.
func (l Limits) Validate() error {
	if l.MaxRecvMsgSize < 0 || l.MaxWatchesPerClient < 0 {
		return errors.New("message size and watch limits must not be negative")
	}
	return nil
}

func (l Limits) serverOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if l.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(l.MaxConcurrentStreams))
	}
	if l.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(l.MaxRecvMsgSize))
	}
	return opts
}

// watchSlots counts each client's open watches.
type watchSlots struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

// errTooManyWatches is the status of a watch over the per-client limit.
var errTooManyWatches = status.Error(codes.ResourceExhausted, "this client has --max-watches-per-client watch or subscribe streams open already; close one first")

// clientKey names the client of a call for per-client limits: its token's
// digest when it sent one, else its IP address (all connections from one
// host share the limit).
func clientKey(ctx context.Context) string {
	if c, ok := CallerFrom(ctx); ok && c.key != "" {
		return c.key
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			return "ip:" + host
		}
		return "addr:" + p.Addr.String()
	}
	return "unknown"
}

// acquire takes a slot for the client of ctx; release gives it back.
func (w *watchSlots) acquire(ctx context.Context) (release func(), err error) {
	if w.max <= 0 {
		return func() {}, nil
	}
	key := clientKey(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[key] >= w.max {
		return nil, errTooManyWatches
	}
	w.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.open[key]--; w.open[key] <= 0 {
				delete(w.open, key)
			}
		})
	}, nil
}
