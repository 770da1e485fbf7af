package fleet

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// snapshot is the plane's counters at one moment.
type snapshot struct {
	at           time.Time
	cpu          map[string]time.Duration // per part
	rss          map[string]float64
	service      map[string]string // part -> service
	etcdRequests float64
	etcdDB       float64
	natsMsgs     float64
}

// self is the bench process: the simulated workers and the probes' clients.
const self = "workers"

func sample(p *Plane) (*snapshot, error) {
	s := &snapshot{at: time.Now(), cpu: map[string]time.Duration{}, rss: map[string]float64{}, service: map[string]string{}}
	for _, pr := range p.procs {
		pid := pr.cmd.Process.Pid
		s.cpu[pr.name], s.rss[pr.name], s.service[pr.name] = procCPU(pid), procRSS(pid), pr.service
		switch pr.service {
		case "etcd":
			m, err := scrape(pr.metrics)
			if err != nil {
				return nil, err
			}
			s.etcdRequests += m["grpc_server_msg_received_total"]
			s.etcdDB = max(s.etcdDB, m["etcd_mvcc_db_total_size_in_bytes"])
		case "nats":
			var v struct {
				InMsgs float64 `json:"in_msgs"`
			}
			if err := getJSON(pr.metrics, &v); err != nil {
				return nil, err
			}
			s.natsMsgs += v.InMsgs
		}
	}
	pid := os.Getpid()
	s.cpu[self], s.rss[self], s.service[self] = procCPU(pid), procRSS(pid), self
	return s, nil
}

// usage is each service's cores over the window and memory at its end;
// the members of a cluster are summed.
func usage(a, b *snapshot) []Usage {
	secs := b.at.Sub(a.at).Seconds()
	var out []Usage
	idx := map[string]int{}
	for _, part := range partsOrder(b) {
		svc := b.service[part]
		name := svc
		if svc == "frontend" {
			name = part // each frontend has its own goal
		}
		i, ok := idx[name]
		if !ok {
			i = len(out)
			idx[name] = i
			out = append(out, Usage{Service: name})
		}
		out[i].Cores += (b.cpu[part] - a.cpu[part]).Seconds() / secs
		out[i].RSS += b.rss[part]
	}
	return out
}

func partsOrder(s *snapshot) []string {
	order := map[string]int{"etcd": 0, "registry": 1, "nats": 2, "eventbus": 3, "router": 4, "frontend": 5, self: 6}
	var parts []string
	for p := range s.cpu {
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(x, y string) int {
		if d := order[s.service[x]] - order[s.service[y]]; d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	return parts
}

// procCPU reads user+system CPU of a process from /proc/<pid>/stat.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// procRSS reads a process's resident memory in bytes from /proc/<pid>/status.
func procRSS(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v
}

// scrape sums each metric's samples (all label sets) of a Prometheus text page.
func scrape(url string) (map[string]float64, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name := line[:sp]
		if b := strings.IndexByte(name, '{'); b >= 0 {
			name = name[:b]
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

func getJSON(url string, v any) error {
	res, err := http.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return json.NewDecoder(res.Body).Decode(v)
}

func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// figure is one number of a Result, named, with its unit.
type figure struct {
	name, unit string
	v          float64
}

func figures(r *Result) []figure {
	var out []figure
	for _, u := range r.Services {
		out = append(out, figure{u.Service + " CPU", "cores", u.Cores}, figure{u.Service + " RSS", "MiB", u.RSS / (1 << 20)})
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	out = append(out,
		figure{"etcd requests", "/s", r.EtcdRequests}, figure{"etcd DB size", "MiB", r.EtcdDBBytes / (1 << 20)},
		figure{"NATS msgs in", "/s", r.NATSMsgs}, figure{"KV events published", "/s", r.KVEventsPerSec},
		figure{"KV messages published", "/s", r.KVSendsPerSec},
		figure{"load reports published", "/s", r.LoadsPerSec},
		figure{"messages to the eventbus (KV, load, or both in one)", "/s", r.MsgsPerSec}, figure{"workers started", "/s", r.StartRate})
	for _, u := range r.Services {
		if u.Service == "eventbus" && r.MsgsPerSec > 0 {
			out = append(out, figure{"eventbus CPU per message received", "µs", u.Cores / r.MsgsPerSec * 1e6})
		}
	}
	for _, l := range []struct {
		name string
		d    []time.Duration
	}{
		{"first request through each frontend (loads the tokenizer)", r.FirstRequest},
		{"worker start (lease, registration, card, first KV batch)", r.WorkerStart}, {"registration to routable", r.Routable}, {"deregistration to unrouted", r.Unrouted},
		{"kill (lease left to expire) to unrouted", r.Killed},
		{"watch fan-out (add) to every frontend", r.FanOutAdd}, {"watch fan-out (delete) to every frontend", r.FanOutDel},
		{"KV event publish to indexed", r.Indexed}, {"route decision (RPC at the router)", r.Route}, {"TTFT through a frontend", r.TTFT},
	} {
		if len(l.d) == 0 {
			continue
		}
		out = append(out, figure{l.name + " p50", "ms", ms(pct(l.d, .5))}, figure{l.name + " p99", "ms", ms(pct(l.d, .99))})
	}
	return out
}

func msList(d []time.Duration) string {
	var b strings.Builder
	for _, x := range d {
		fmt.Fprintf(&b, " %.0f", float64(x)/float64(time.Millisecond))
	}
	return b.String()
}

func printResult(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n%d workers (load average %.2f at the window's end; %d KV events published, %d indexed)\n", r.N, r.Load1, r.Published, r.Applied)
	if r.Reregistered > 0 {
		fmt.Fprintf(w, "%d leases lost (keep-alives too late) and their workers registered again; %d KV events were of the lost instances\n", r.Reregistered, r.KVOfLost)
	}
	fmt.Fprintf(w, "%-58s %12s  %s\n%s\n", "figure", "value", "unit", strings.Repeat("-", 78))
	for _, f := range figures(r) {
		fmt.Fprintf(w, "%-58s %12.3f  %s\n", f.name, f.v, f.unit)
	}
	fmt.Fprintf(w, "registration to routable, each probe (ms):%s\n", msList(r.Routable))
	fmt.Fprintf(w, "deregistration to unrouted, each probe (ms):%s\n", msList(r.Unrouted))
	if len(r.Killed) > 0 {
		fmt.Fprintf(w, "kill to unrouted, each killed probe (ms; the lease's TTL bounds it, refreshed at half the TTL):%s\n", msList(r.Killed))
	}
	for _, l := range r.Lost {
		fmt.Fprintf(w, "LOST: %s\n", l)
	}
}

// printGrowth fits each figure to a*N^k over the fleet sizes (least squares
// on log-log) and prints k: 1 grows linearly, 0 not at all.
func printGrowth(w io.Writer, rs []*Result) {
	if len(rs) < 2 {
		return
	}
	fmt.Fprintf(w, "\ngrowth with N (exponent k of a fit value = a*N^k over N = %s)\n", sizes(rs))
	fmt.Fprintf(w, "%-58s %8s  %s\n%s\n", "figure", "k", "values", strings.Repeat("-", 78))
	for _, name := range figureNames(rs) {
		k, vals, ok := growth(rs, name)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "%-58s %8.2f  %s\n", name, k, vals)
	}
}

func sizes(rs []*Result) string {
	var s []string
	for _, r := range rs {
		s = append(s, strconv.Itoa(r.N))
	}
	return strings.Join(s, ", ")
}

func figureNames(rs []*Result) []string {
	var names []string
	for _, r := range rs {
		for _, f := range figures(r) {
			if !slices.Contains(names, f.name) {
				names = append(names, f.name)
			}
		}
	}
	return names
}

// growth is the log-log slope of figure name over the results that have it
// with a positive value.
func growth(rs []*Result, name string) (float64, string, bool) {
	var xs, ys []float64
	var vals []string
	for _, r := range rs {
		for _, f := range figures(r) {
			if f.name == name && f.v > 0 {
				xs, ys = append(xs, math.Log(float64(r.N))), append(ys, math.Log(f.v))
				vals = append(vals, strconv.FormatFloat(f.v, 'g', 4, 64))
			}
		}
	}
	if len(xs) < 2 {
		return 0, "", false
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(xs))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, "", false
	}
	return sxy / sxx, strings.Join(vals, " / "), true
}

// writeCSV writes one row per fleet size and figure: n, load1, figure,
// unit, value.
func writeCSV(path string, rs []*Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"n", "load1", "figure", "unit", "value"})
	for _, r := range rs {
		for _, fg := range figures(r) {
			_ = w.Write([]string{strconv.Itoa(r.N), strconv.FormatFloat(r.Load1, 'f', 2, 64), fg.name, fg.unit, strconv.FormatFloat(fg.v, 'g', 6, 64)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
