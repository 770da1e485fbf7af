package replay

import (
	"bufio"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Dist is a log-normal length distribution clamped to [Min, Max]: half the
// draws fall below Median, and Sigma (the standard deviation of the
// logarithm) sets the spread: 0 is a constant, 1 spans roughly a factor of
// 7 between the 16th and 84th percentiles.
type Dist struct {
	Median, Sigma float64
	Min, Max      int
}

func (d Dist) draw(r *rand.Rand) int {
	v := d.Median * math.Exp(d.Sigma*r.NormFloat64())
	return min(max(int(math.Round(v)), d.Min), d.Max)
}

func (d Dist) validate(name string) error {
	if d.Median <= 0 || d.Sigma < 0 || d.Min < 1 || d.Max < d.Min || math.IsNaN(d.Median) || math.IsNaN(d.Sigma) {
		return fmt.Errorf("replay: generator %s: median %v must be positive, sigma %v not negative, 1 <= min %d <= max %d",
			name, d.Median, d.Sigma, d.Min, d.Max)
	}
	return nil
}

// GenConfig describes a synthetic workload in the terms traces are
// usually characterised by. Requests come in sessions: a session starts
// at Poisson arrivals, belongs to one of Groups applications (each with
// its own system prompt, chosen with Zipf-skewed popularity), and has a
// geometric number of turns. Each turn's prompt is the previous turn's
// prompt, its answer and a new user message, so a turn shares the full
// blocks of the previous prompt; the first turn shares the full blocks of
// its group's system prompt. Every other block is new.
type GenConfig struct {
	// Requests is how many requests (lines) to write.
	Requests int
	// Rate is the mean request arrival rate per second (all turns counted).
	Rate float64
	// BlockSize is the number of tokens each hash id stands for.
	BlockSize int
	// Groups is the number of distinct system prompts.
	Groups int
	// GroupSkew is the Zipf exponent of group popularity: 0 is uniform,
	// 1 makes the first group about as popular as the next few together.
	GroupSkew float64
	// Unshared is the fraction of sessions with a system prompt of their
	// own (no group), such as one-off API calls.
	Unshared float64
	// System is the length of a system prompt in tokens.
	System Dist
	// User is the length of a turn's new user message in tokens.
	User Dist
	// TailProb is the probability that a user message instead comes from
	// a Pareto tail (documents, code bases pasted in) with scale TailMin
	// tokens and shape TailAlpha (smaller is heavier; <= 2 has infinite
	// variance), clamped to MaxInput.
	TailProb  float64
	TailMin   int
	TailAlpha float64
	// Output is the answer length in tokens.
	Output Dist
	// Turns is the mean number of turns per session (geometric, >= 1).
	Turns float64
	// Think is the mean time between a turn's arrival and the next one's
	// (exponential), in the trace's own time.
	Think time.Duration
	// MaxInput caps a prompt's length; a session whose prompt would grow
	// past it ends.
	MaxInput int
	// Seed makes the trace repeatable.
	Seed uint64
	// Profile shapes the arrival rate over time (flat when unset): Rate is
	// then the mean over the trace.
	Profile RateProfile
}

// Presets are named starting points for GenConfig; flags change any knob.
var Presets = map[string]GenConfig{
	// low-reuse: mostly one-shot requests with short shared prefixes, long
	// answers and a heavy tail of long prompts.
	"low-reuse": {
		Requests: 4000, Rate: 2.5, BlockSize: 512, Groups: 24, GroupSkew: 1.0, Unshared: 0.35,
		System:   Dist{Median: 1200, Sigma: 0.6, Min: 64, Max: 8192},
		User:     Dist{Median: 5000, Sigma: 0.9, Min: 16, Max: 65536},
		TailProb: 0.06, TailMin: 16000, TailAlpha: 1.3,
		Output: Dist{Median: 500, Sigma: 0.8, Min: 8, Max: 4096},
		Turns:  1.2, Think: 30 * time.Second, MaxInput: 100000, Seed: 1,
	},
	// sessions: many small applications sharing system prompts, used in
	// multi-turn chats.
	"sessions": {
		Requests: 4000, Rate: 10, BlockSize: 512, Groups: 160, GroupSkew: 0.8, Unshared: 0.05,
		System:   Dist{Median: 3000, Sigma: 0.5, Min: 256, Max: 16384},
		User:     Dist{Median: 350, Sigma: 1.0, Min: 8, Max: 16384},
		TailProb: 0.02, TailMin: 6000, TailAlpha: 1.5,
		Output: Dist{Median: 200, Sigma: 0.8, Min: 4, Max: 2048},
		Turns:  4, Think: 25 * time.Second, MaxInput: 64000, Seed: 2,
	},
	// agents: multi-turn agent sessions whose turns paste tool output
	// (user messages of 600 tokens at the median) and get short answers
	// (100), over 16 shared instruction prompts of 2,000 tokens, 10 turns
	// a session 60 s apart. It is the workload a host KV tier is for: a
	// session's context outlives the GPU cache between its turns, and the
	// work is prefill (the capacity bound's prefill is about twice its
	// decode), which a prefix loaded back from host saves. Its cached
	// working set, the size of one LRU cache that keeps all of its reuse
	// (Bounds.Pooled at that size reaches Reuse), is 2 to 3 times the GPU
	// blocks of the replay's tier configuration (8 engines x 12,800 blocks
	// of 16 tokens, --kv-blocks 12800) and within them and their host
	// tiers (--host-kv-blocks 51200, 5 times the GPU blocks in all): about
	// the geometric middle of the two. The rate scales compress the think
	// time with the arrivals, so the working set is the same at every
	// scale.
	"agents": {
		Requests: 4000, Rate: 10, BlockSize: 512, Groups: 16, GroupSkew: 0.8, Unshared: 0.05,
		System:   Dist{Median: 2000, Sigma: 0.5, Min: 256, Max: 16384},
		User:     Dist{Median: 600, Sigma: 0.8, Min: 8, Max: 16384},
		TailProb: 0.02, TailMin: 6000, TailAlpha: 1.5,
		Output: Dist{Median: 100, Sigma: 0.6, Min: 4, Max: 2048},
		Turns:  10, Think: 60 * time.Second, MaxInput: 64000, Seed: 4,
	},
	// long-context: one-shot requests over long documents (retrieval,
	// summaries, code review): prompts of 3,000 to 12,000 tokens (a shared
	// instruction prompt of 512 to 2,048 and a document of 2,500 to
	// 10,000, capped at 12,000), answers of 300 to 1,000 tokens.
	"long-context": {
		Requests: 1500, Rate: 2, BlockSize: 512, Groups: 16, GroupSkew: 0.8, Unshared: 0.2,
		System: Dist{Median: 1024, Sigma: 0.5, Min: 512, Max: 2048},
		User:   Dist{Median: 5500, Sigma: 0.45, Min: 2500, Max: 10000},
		Output: Dist{Median: 550, Sigma: 0.4, Min: 300, Max: 1000},
		Turns:  1, Think: time.Second, MaxInput: 12000, Seed: 3,
	},
}

// Validate checks the knobs.
func (g GenConfig) Validate() error {
	switch {
	case g.Requests < 1:
		return errors.New("replay: generator: --requests must be positive")
	case !(g.Rate > 0) || math.IsInf(g.Rate, 0):
		return errors.New("replay: generator: --rate must be positive")
	case g.BlockSize < 1:
		return errors.New("replay: generator: --block-size must be positive")
	case g.Groups < 1:
		return errors.New("replay: generator: --groups must be positive")
	case g.GroupSkew < 0 || math.IsNaN(g.GroupSkew):
		return errors.New("replay: generator: --group-skew must not be negative")
	case !(g.Unshared >= 0 && g.Unshared <= 1):
		return errors.New("replay: generator: --unshared must be in [0, 1]")
	case !(g.TailProb >= 0 && g.TailProb <= 1):
		return errors.New("replay: generator: --tail-prob must be in [0, 1]")
	case g.TailProb > 0 && (g.TailMin < 1 || !(g.TailAlpha > 0)):
		return errors.New("replay: generator: --tail-min and --tail-alpha must be positive")
	case !(g.Turns >= 1) || math.IsInf(g.Turns, 0):
		return errors.New("replay: generator: --turns must be at least 1")
	case g.Think < 0:
		return errors.New("replay: generator: --think must not be negative")
	case g.MaxInput < 1 || g.MaxInput > MaxInputLength:
		return fmt.Errorf("replay: generator: --max-input must be in 1..%d", MaxInputLength)
	case g.Output.Max > MaxOutputLength:
		return fmt.Errorf("replay: generator: --output-max must be at most %d", MaxOutputLength)
	}
	for name, d := range map[string]Dist{"system": g.System, "user": g.User, "output": g.Output} {
		if err := d.validate(name); err != nil {
			return err
		}
	}
	return g.Profile.Validate()
}

// RegisterFlags adds the generator's knobs to fs, bound to g.
func (g *GenConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&g.Requests, "requests", g.Requests, "requests to generate")
	fs.Float64Var(&g.Rate, "rate", g.Rate, "mean arrivals per second, all turns counted (the replay's --rate-scales multiply it)")
	fs.IntVar(&g.BlockSize, "block-size", g.BlockSize, "tokens per hash id")
	fs.IntVar(&g.Groups, "groups", g.Groups, "distinct shared system prompts")
	fs.Float64Var(&g.GroupSkew, "group-skew", g.GroupSkew, "Zipf exponent of group popularity (0: uniform)")
	fs.Float64Var(&g.Unshared, "unshared", g.Unshared, "fraction of sessions whose system prompt is their own")
	distFlags(fs, "system", "system prompt tokens", &g.System)
	distFlags(fs, "user", "new user tokens per turn", &g.User)
	fs.Float64Var(&g.TailProb, "tail-prob", g.TailProb, "probability a user message comes from the Pareto tail instead")
	fs.IntVar(&g.TailMin, "tail-min", g.TailMin, "Pareto tail scale (its smallest value), tokens")
	fs.Float64Var(&g.TailAlpha, "tail-alpha", g.TailAlpha, "Pareto tail shape (smaller: heavier)")
	distFlags(fs, "output", "answer tokens", &g.Output)
	fs.Float64Var(&g.Turns, "turns", g.Turns, "mean turns per session (geometric, at least 1)")
	fs.DurationVar(&g.Think, "think", g.Think, "mean time from one turn's arrival to the next (exponential)")
	fs.IntVar(&g.MaxInput, "max-input", g.MaxInput, "longest prompt; a session that would grow past it ends")
	fs.Uint64Var(&g.Seed, "seed", g.Seed, "random seed")
	fs.StringVar(&g.Profile.Kind, "rate-profile", g.Profile.Kind, "arrival rate over time: "+strings.Join(RateProfiles, ", ")+" (empty: flat); --rate is the mean")
	fs.DurationVar(&g.Profile.Period, "profile-period", g.Profile.Period, "diurnal profile: the period (the rate's trough at the start, its peak half a period later)")
	fs.Float64Var(&g.Profile.Amplitude, "profile-amplitude", g.Profile.Amplitude, "diurnal profile: the rate swings by this share of the mean, in [0, 1)")
	fs.DurationVar(&g.Profile.BurstEvery, "burst-every", g.Profile.BurstEvery, "bursts profile: mean time between burst starts (Poisson)")
	fs.DurationVar(&g.Profile.BurstLength, "burst-length", g.Profile.BurstLength, "bursts profile: how long a burst lasts")
	fs.Float64Var(&g.Profile.BurstFactor, "burst-factor", g.Profile.BurstFactor, "bursts profile: the rate's factor during a burst (>= 1)")
}

func distFlags(fs *flag.FlagSet, name, what string, d *Dist) {
	fs.Float64Var(&d.Median, name+"-median", d.Median, what+": median of the log-normal")
	fs.Float64Var(&d.Sigma, name+"-sigma", d.Sigma, what+": sigma of the log-normal")
	fs.IntVar(&d.Min, name+"-min", d.Min, what+": smallest")
	fs.IntVar(&d.Max, name+"-max", d.Max, what+": largest")
}

// GenCommand is the trace generator's command line: --preset picks the
// base knobs, and any knob flag given changes that preset's value.
func GenCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("router-trace-gen", flag.ContinueOnError)
	preset := fs.String("preset", "low-reuse", "starting knobs: "+strings.Join(presetNames(), ", "))
	out := fs.String("out", "", "output file (.jsonl, or .jsonl.gz to compress); empty: standard output")
	var scratch GenConfig
	scratch.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	g, ok := Presets[*preset]
	if !ok {
		return fmt.Errorf("replay: unknown --preset %q: valid presets are %s", *preset, strings.Join(presetNames(), ", "))
	}
	// Re-apply the flags given on top of the preset.
	bound := flag.NewFlagSet("", flag.ContinueOnError)
	g.RegisterFlags(bound)
	var err error
	fs.Visit(func(f *flag.Flag) {
		if bound.Lookup(f.Name) != nil && err == nil {
			err = bound.Set(f.Name, f.Value.String())
		}
	})
	if err != nil {
		return err
	}
	reqs, err := Generate(g)
	if err != nil {
		return err
	}
	if *out == "" {
		return WriteTrace(stdout, reqs)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	var w io.Writer = f
	var gz *gzip.Writer
	if strings.HasSuffix(*out, ".gz") {
		gz, _ = gzip.NewWriterLevel(f, gzip.BestCompression)
		w = gz
	}
	err = WriteTrace(w, reqs)
	if gz != nil {
		err = errors.Join(err, gz.Close())
	}
	return errors.Join(err, f.Close())
}

func presetNames() []string {
	var names []string
	for n := range Presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// session is one conversation being generated.
type session struct {
	id     uint64        // its session id, from 1
	next   time.Duration // arrival of its next turn
	left   int           // turns still to come
	ids    []uint64      // hash ids of its last prompt
	input  int           // its last prompt's length
	output int           // its last answer's length
}

// Generate makes a trace from the knobs: deterministic for a seed.
func Generate(g GenConfig) ([]Request, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(g.Seed, 0x7ace))
	var nextID uint64
	fresh := func(ids []uint64, n int) []uint64 {
		for range n {
			ids = append(ids, nextID)
			nextID++
		}
		return ids
	}
	// Each group's system prompt: its full blocks are shared; its partial
	// last block merges with the user message and is never shared.
	type group struct {
		tokens int
		ids    []uint64
	}
	groups := make([]group, g.Groups)
	cum := make([]float64, g.Groups)
	total := 0.0
	for i := range groups {
		n := g.System.draw(r)
		groups[i] = group{tokens: n, ids: fresh(nil, n/g.BlockSize)}
		total += 1 / math.Pow(float64(i+1), g.GroupSkew)
		cum[i] = total
	}
	pickGroup := func() group {
		x := r.Float64() * total
		i, _ := slices.BinarySearch(cum, x)
		return groups[min(i, len(groups)-1)]
	}
	user := func() int {
		if g.TailProb > 0 && r.Float64() < g.TailProb {
			v := float64(g.TailMin) / math.Pow(1-r.Float64(), 1/g.TailAlpha)
			return int(min(v, float64(g.MaxInput)))
		}
		return g.User.draw(r)
	}
	// Sessions start at rate Rate/Turns, so that turns arrive at Rate.
	sessionGap := float64(time.Second) * g.Turns / g.Rate
	pStop := 1 / g.Turns
	var live []*session
	var sessions uint64
	var start time.Duration
	out := make([]Request, 0, g.Requests)
	for len(out) < g.Requests {
		// The next event: a new session, or the earliest pending turn.
		next := -1
		for i, s := range live {
			if next < 0 || s.next < live[next].next {
				next = i
			}
		}
		if next < 0 || start <= live[next].next {
			sessions++
			s := &session{id: sessions, next: start, left: 1}
			for r.Float64() >= pStop {
				s.left++
			}
			if r.Float64() < g.Unshared {
				n := g.System.draw(r)
				s.ids, s.input = fresh(nil, n/g.BlockSize), n/g.BlockSize*g.BlockSize
			} else {
				gr := pickGroup()
				s.ids, s.input = gr.ids, len(gr.ids)*g.BlockSize
			}
			live = append(live, s)
			start += time.Duration(r.ExpFloat64() * sessionGap)
			continue
		}
		s := live[next]
		// The prompt: the shared full blocks so far, then the rest of the
		// history, and the new message.
		shared := s.ids[:min(s.input/g.BlockSize, len(s.ids))]
		input := s.input + s.output + user()
		if input > g.MaxInput {
			if len(shared) > 0 && s.output > 0 { // a later turn outgrew the cap: the session ends
				live = slices.Delete(live, next, next+1)
				continue
			}
			input = g.MaxInput
		}
		ids := fresh(slices.Clip(shared), (input+g.BlockSize-1)/g.BlockSize-len(shared))
		o := g.Output.draw(r)
		out = append(out, Request{Arrival: s.next, InputLength: input, OutputLength: o, HashIDs: ids, Session: s.id})
		s.ids, s.input, s.output = ids, input, o
		s.left--
		if s.left == 0 {
			live = slices.Delete(live, next, next+1)
			continue
		}
		s.next += time.Duration(r.ExpFloat64() * float64(g.Think))
	}
	g.Profile.Warp(out, g.Seed)
	return out, nil
}

// WriteTrace writes requests as Mooncake JSON lines, timestamps in
// milliseconds.
func WriteTrace(w io.Writer, reqs []Request) error {
	bw := bufio.NewWriter(w)
	var b []byte
	for _, q := range reqs {
		b = append(b[:0], `{"timestamp": `...)
		b = strconv.AppendInt(b, q.Arrival.Milliseconds(), 10)
		b = append(b, `, "input_length": `...)
		b = strconv.AppendInt(b, int64(q.InputLength), 10)
		b = append(b, `, "output_length": `...)
		b = strconv.AppendInt(b, int64(q.OutputLength), 10)
		b = append(b, `, "hash_ids": [`...)
		for i, id := range q.HashIDs {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendUint(b, id, 10)
		}
		b = append(b, ']')
		if q.Session != 0 {
			b = append(b, `, "session_id": `...)
			b = strconv.AppendUint(b, q.Session, 10)
		}
		b = append(b, "}\n"...)
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}
