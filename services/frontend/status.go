package frontend

import (
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/registryclient"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// The live status page: GET /status is a server-rendered page whose few
// lines of script refresh it from GET /status.json every two seconds. Off
// with --no-status-page.

const (
	// bucketWidth and windowBuckets make the page's window: the last five
	// minutes in ten-second buckets.
	bucketWidth   = 10 * time.Second
	windowBuckets = 30
	// statsTimeout bounds the router's GetStats for one page.
	statsTimeout = time.Second
)

//go:embed status.html
var statusHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"seconds": func(ms float64) float64 { return ms / 1000 },
}).Parse(statusHTML))

// bucket is ten seconds of finished requests.
type bucket struct {
	start          time.Time
	requests, errs int
	ttftSum        time.Duration
	ttftN          int
	ttftMax        time.Duration
	promptTokens   uint64
	cachedTokens   uint64
	// routed counts the requests each worker instance served.
	routed map[uint64]int
}

// recent keeps the last windowBuckets buckets of finished requests for the
// status page. It is safe for concurrent use.
type recent struct {
	mu      sync.Mutex
	buckets []*bucket // oldest first
	now     func() time.Time
}

func newRecent() *recent { return &recent{now: time.Now} }

// finished records one request: the instance that served it (0 if none),
// its time to first token (0 if it produced none), its prompt and cached
// prompt tokens, and whether it failed.
func (r *recent) finished(instance uint64, ttft time.Duration, prompt, cached uint32, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.current()
	b.requests++
	if failed {
		b.errs++
	}
	if ttft > 0 {
		b.ttftSum += ttft
		b.ttftN++
		b.ttftMax = max(b.ttftMax, ttft)
	}
	b.promptTokens += uint64(prompt)
	b.cachedTokens += uint64(cached)
	if instance != 0 {
		b.routed[instance]++
	}
}

// current returns the bucket of now, starting one and dropping the ones
// older than the window as time moves on.
func (r *recent) current() *bucket {
	start := r.now().Truncate(bucketWidth)
	if n := len(r.buckets); n > 0 && r.buckets[n-1].start.Equal(start) {
		return r.buckets[n-1]
	}
	b := &bucket{start: start, routed: map[uint64]int{}}
	r.buckets = append(r.buckets, b)
	r.trim()
	return b
}

func (r *recent) trim() {
	cutoff := r.now().Truncate(bucketWidth).Add(-(windowBuckets - 1) * bucketWidth)
	i := 0
	for i < len(r.buckets) && r.buckets[i].start.Before(cutoff) {
		i++
	}
	r.buckets = r.buckets[i:]
}

// StatusPoint is one bucket of the status page's window.
type StatusPoint struct {
	Start         time.Time `json:"start"`
	Requests      int       `json:"requests"`
	Errors        int       `json:"errors"`
	TTFTAvgMillis float64   `json:"ttft_avg_ms"`
	TTFTMaxMillis float64   `json:"ttft_max_ms"`
	// CachedShare is the share of prompt tokens the workers had cached.
	CachedShare float64 `json:"cached_share"`
}

// StatusWorker is one worker instance on the status page.
type StatusWorker struct {
	ID       string   `json:"id"`
	Endpoint string   `json:"endpoint"`
	Address  string   `json:"address"`
	Models   []string `json:"models"`
	// Role is agg, prefill or decode.
	Role      string `json:"role"`
	InFlight  int    `json:"in_flight"`
	Routed    int    `json:"routed_in_window"`
	HasRouter bool   `json:"has_router_view"`
	// State is live, or fenced while this frontend keeps the worker out of
	// routing because it could not reach it (until a request to it succeeds
	// or the registry announces it anew); FencedForMillis is how long until
	// a request may try it again (0: the next one may).
	State           string  `json:"state"`
	FencedForMillis float64 `json:"fenced_for_ms,omitempty"`
	// LastEventAgeMillis is the age of the router's last KV event of the
	// worker; absent when the router has none (or no router view).
	LastEventAgeMillis *float64 `json:"last_event_age_ms,omitempty"`
	// The router's view: its requests, queued blocks and indexed blocks.
	Requests      uint32 `json:"requests"`
	PrefillBlocks uint32 `json:"prefill_blocks"`
	DecodeBlocks  uint32 `json:"decode_blocks"`
	CachedBlocks  uint64 `json:"cached_blocks"`
}

// StatusReport is GET /status.json.
type StatusReport struct {
	Time       time.Time `json:"time"`
	RouterMode string    `json:"router_mode"`
	RouterView string    `json:"router_view"`
	Models     []string  `json:"models"`
	// Pools count each model's workers by role.
	Pools   []registryclient.Pool `json:"pools"`
	Workers []StatusWorker        `json:"workers"`
	// IndexedBlocks and the event counters are the router's.
	IndexedBlocks uint64        `json:"indexed_blocks"`
	EventsApplied uint64        `json:"events_applied"`
	Window        []StatusPoint `json:"window"`
	// Totals over the window.
	Requests      int     `json:"requests"`
	Errors        int     `json:"errors"`
	TTFTAvgMillis float64 `json:"ttft_avg_ms"`
	CachedShare   float64 `json:"cached_share"`
	// Admission is each model's admission queue (admission.go).
	Admission []StatusQueue `json:"admission"`
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// report builds the status page's data.
func (s *Service) statusReport(ctx context.Context) StatusReport {
	mode, _ := s.cfg.mode()
	rep := StatusReport{Time: time.Now().UTC(), RouterMode: string(mode), Models: s.catalog.modelNames(), Workers: []StatusWorker{}, Window: []StatusPoint{},
		Admission: s.admission.status()}
	stats, view := s.routerStats(ctx)
	rep.RouterView = view
	byID := map[uint64]*routerv1.WorkerStats{}
	if stats != nil {
		rep.IndexedBlocks, rep.EventsApplied = stats.IndexedBlocks, stats.EventsApplied
		for _, w := range stats.Workers {
			if w.DpRank == 0 {
				byID[w.InstanceId] = w
			}
		}
	}
	modelsOf := map[uint64][]string{}
	cards := s.models.Items()
	for _, c := range cards {
		modelsOf[c.InstanceId] = append(modelsOf[c.InstanceId], c.ModelName)
	}
	rep.Pools = registryclient.Pools(cards, s.instances.Items())

	s.recent.mu.Lock()
	s.recent.trim()
	routed := map[uint64]int{}
	var ttftSum time.Duration
	var ttftN int
	var prompt, cached uint64
	for _, b := range s.recent.buckets {
		p := StatusPoint{Start: b.start, Requests: b.requests, Errors: b.errs, TTFTMaxMillis: millis(b.ttftMax)}
		if b.ttftN > 0 {
			p.TTFTAvgMillis = millis(b.ttftSum / time.Duration(b.ttftN))
		}
		if b.promptTokens > 0 {
			p.CachedShare = float64(b.cachedTokens) / float64(b.promptTokens)
		}
		rep.Window = append(rep.Window, p)
		rep.Requests += b.requests
		rep.Errors += b.errs
		ttftSum, ttftN = ttftSum+b.ttftSum, ttftN+b.ttftN
		prompt, cached = prompt+b.promptTokens, cached+b.cachedTokens
		for id, n := range b.routed {
			routed[id] += n
		}
	}
	s.recent.mu.Unlock()
	if ttftN > 0 {
		rep.TTFTAvgMillis = millis(ttftSum / time.Duration(ttftN))
	}
	if prompt > 0 {
		rep.CachedShare = float64(cached) / float64(prompt)
	}

	fenced := s.fence.fencedNow()
	for _, in := range s.instances.Items() {
		w := StatusWorker{ID: fmt.Sprintf("%x", in.InstanceId), Endpoint: in.Namespace + "/" + in.Component + "/" + in.Endpoint,
			Models: modelsOf[in.InstanceId], Role: wire.RoleName(in.Role), InFlight: s.load.of(in.InstanceId), Routed: routed[in.InstanceId]}
		w.Address = transportString(in.GetTransport())
		w.State = "live"
		if d, ok := fenced[in.InstanceId]; ok {
			w.State, w.FencedForMillis = "fenced", millis(d)
		}
		if st, ok := byID[in.InstanceId]; ok {
			w.HasRouter = true
			w.Requests, w.PrefillBlocks, w.DecodeBlocks, w.CachedBlocks = st.Requests, st.PrefillBlocks, st.DecodeBlocks, st.CachedBlocks
			if t := st.GetLastEventTime(); t != nil {
				a := millis(max(0, rep.Time.Sub(t.AsTime())))
				w.LastEventAgeMillis = &a
			}
		}
		rep.Workers = append(rep.Workers, w)
	}
	sort.Slice(rep.Workers, func(i, j int) bool { return rep.Workers[i].ID < rep.Workers[j].ID })
	return rep
}

// routerStats asks the router service (the first replica that answers) or,
// when this frontend routes in process, its own core.
func (s *Service) routerStats(ctx context.Context) (*routerv1.GetStatsResponse, string) {
	for i, remote := range s.routing.remotes {
		cctx, cancel := context.WithTimeout(ctx, statsTimeout)
		st, err := remote.GetStats(cctx, &routerv1.GetStatsRequest{})
		cancel()
		if err == nil {
			return st, "router service " + splitAddrs(s.cfg.RouterAddr)[i]
		}
	}
	if len(s.routing.remotes) > 0 {
		return s.routing.local.Stats(), "in-process fallback (the router service did not answer)"
	}
	return s.routing.local.Stats(), "in process"
}

func (s *Service) handleStatusJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, s.statusReport(r.Context()))
}

func (s *Service) handleStatusPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusPage.Execute(w, s.statusReport(r.Context())); err != nil {
		s.log.Warn("status page not rendered", "err", err.Error())
	}
}

// transportString lists the addresses of t, "tcp host:port, http url".
func transportString(t *commonv1.Transport) string {
	addrs := transport.AddressesOf(t)
	if len(addrs) == 0 {
		return "-"
	}
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = string(a.Kind) + " " + a.Addr
	}
	return strings.Join(parts, ", ")
}

// of returns this frontend's requests in flight on instance id.
func (l *load) of(id uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[id]
}

// generation is what one generation request did.
type generation struct {
	id       string
	instance uint64
	// prefill is the prefill worker of a two-leg attempt; 0 if none.
	prefill                uint64
	prompt, cached, output uint32
	ttft                   time.Duration
	start, first           time.Time
	err                    error
}

// trackGeneration starts the record of a generation and wraps emit to note
// its first token.
func (r *recorder) trackGeneration(id string, prompt int, start time.Time, emit emitFunc) emitFunc {
	g := &generation{id: id, prompt: uint32(prompt), start: start}
	r.gen = g
	return func(ids []uint32, lps []*workerv1.TokenLogprob, more bool) error {
		if g.first.IsZero() {
			g.first = time.Now()
			g.ttft = g.first.Sub(g.start)
		}
		return emit(ids, lps, more)
	}
}

// done notes how the generation ended.
func (g *generation) done(out outcome, err error) {
	g.instance, g.prefill, g.cached, g.output, g.err = out.instance, out.prefill, out.cachedPrompt, out.completion, err
}

// accessLog writes one line per API request and feeds the status page.
func (s *Service) accessLog(r *http.Request, rec *recorder, endpoint string, start time.Time) {
	if g := rec.gen; g != nil {
		s.recent.finished(g.instance, g.ttft, g.prompt, g.cached, rec.counted() >= 400 || g.err != nil)
	}
	if !s.log.Enabled(r.Context(), slog.LevelInfo) {
		return // no line to build
	}
	attrs := []any{"method", r.Method, "path", r.URL.Path, "x_request_id", requestIDOf(r.Context()), "endpoint", endpoint, "status", rec.counted(),
		"duration_ms", millis(time.Since(start))}
	if rec.model != "" {
		attrs = append(attrs, "model", rec.model)
	}
	if rec.key != nil {
		attrs = append(attrs, "api_key", rec.key.name) // the key's name, never the key
	}
	if g := rec.gen; g != nil {
		attrs = append(attrs, "request_id", g.id, "worker", fmt.Sprintf("%x", g.instance), "prompt_tokens", g.prompt,
			"cached_tokens", g.cached, "output_tokens", g.output, "ttft_ms", millis(g.ttft))
		if g.prefill != 0 {
			attrs = append(attrs, "prefill_worker", fmt.Sprintf("%x", g.prefill))
		}
		if g.err != nil {
			attrs = append(attrs, "err", g.err.Error())
		}
	}
	s.log.Info("request", attrs...)
}
