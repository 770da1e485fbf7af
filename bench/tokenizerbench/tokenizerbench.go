// Package tokenizerbench is the benchmark behind tokenizer-bench: the
// preprocessing speed of the frontend on one core (tokenizer.json load time,
// Encode and Decode tokens per second on a mixed multilingual text, and the
// time to turn a 60,000-token chat into token ids, chat template render plus
// Encode, first with a cold merge cache and then in steady state).
package tokenizerbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
)

// Run reads the Qwen3 files from dir, measures each throughput for dur
// and preprocesses a chat of promptTokens tokens, and prints the table on
// standard output.
func Run(dir string, dur time.Duration, promptTokens int) error {
	// One core: the figures are per core, whatever the machine.
	runtime.GOMAXPROCS(1)
	start := time.Now()
	tok, cfg, err := tokenizer.LoadDir(dir)
	if err != nil {
		return err
	}
	loadTime := time.Since(start)
	tmpl, err := chattemplate.Parse(cfg.ChatTemplate)
	if err != nil {
		return err
	}
	texts, counts, err := referenceTexts(filepath.Join(dir, "reference-tokens.jsonl"))
	if err != nil {
		return err
	}
	corpus := strings.Join(texts, "\n")

	// The 60k prompt first, on a fresh tokenizer: the cold-cache case.
	msgs := conversation(texts, counts, promptTokens)
	in := chattemplate.Input{Messages: msgs, AddGenerationPrompt: true, EOSToken: cfg.EOSToken}
	preprocess := func() (int, error) {
		prompt, err := tmpl.Render(in)
		if err != nil {
			return 0, err
		}
		return len(tok.Encode(prompt)), nil
	}
	start = time.Now()
	n60k, err := preprocess()
	if err != nil {
		return err
	}
	cold := time.Since(start)
	var warm time.Duration
	var renderOnly time.Duration
	for i := range 5 {
		start = time.Now()
		if _, err := preprocess(); err != nil {
			return err
		}
		if d := time.Since(start); i == 0 || d < warm {
			warm = d
		}
		start = time.Now()
		if _, err := tmpl.Render(in); err != nil {
			return err
		}
		if d := time.Since(start); i == 0 || d < renderOnly {
			renderOnly = d
		}
	}

	ids := tok.Encode(corpus)
	encRate := rate(dur, len(ids), func() { ids = tok.AppendEncode(ids[:0], corpus) })
	decRate := rate(dur, len(ids), func() { _ = tok.Decode(ids) })

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "measure\tvalue\tnote\n")
	fmt.Fprintf(w, "load tokenizer.json.gz\t%v\t%d tokens in vocab\n", loadTime.Round(time.Millisecond), tok.VocabSize())
	fmt.Fprintf(w, "encode, 1 core\t%.2f M tokens/s\tmixed multilingual text, %d tokens, warm merge cache\n", encRate/1e6, len(ids))
	fmt.Fprintf(w, "decode, 1 core\t%.2f M tokens/s\t\n", decRate/1e6)
	fmt.Fprintf(w, "%dk-token prompt, cold\t%v\ttemplate + encode, first request (empty merge cache)\n", n60k/1000, cold.Round(10*time.Microsecond))
	fmt.Fprintf(w, "%dk-token prompt, steady\t%v\ttemplate + encode, best of 5 (template alone %v)\n", n60k/1000, warm.Round(10*time.Microsecond), renderOnly.Round(10*time.Microsecond))
	return w.Flush()
}

// rate repeats fn for about dur and returns tokens per second.
func rate(dur time.Duration, tokens int, fn func()) float64 {
	n := 0
	start := time.Now()
	for time.Since(start) < dur {
		fn()
		n++
	}
	return float64(n*tokens) / time.Since(start).Seconds()
}

// conversation alternates user and assistant turns drawn from texts until
// the rendered prompt holds about want tokens. It counts tokens with the
// reference counts, so that the tokenizer's cache stays cold.
func conversation(texts []string, counts []int, want int) []chattemplate.Message {
	msgs := []chattemplate.Message{{Role: "system", Content: "You are a helpful assistant."}}
	total := 0
	for i := 0; total < want; i++ {
		// Five reference lines per turn, so turns are paragraph-sized.
		var b strings.Builder
		for j := range 5 {
			k := (5*i + j) % len(texts)
			b.WriteString(texts[k])
			b.WriteByte('\n')
			total += counts[k]
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, chattemplate.Message{Role: role, Content: b.String()})
		total += 3 // role header and end marker
	}
	if msgs[len(msgs)-1].Role == "assistant" {
		msgs = append(msgs, chattemplate.Message{Role: "user", Content: texts[0]})
	}
	return msgs
}

// referenceTexts returns the texts of a reference-tokens.jsonl and their
// token counts.
func referenceTexts(path string) ([]string, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var texts []string
	var counts []int
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var line struct {
			Text string   `json:"text"`
			IDs  []uint32 `json:"ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		texts = append(texts, line.Text)
		counts = append(counts, len(line.IDs))
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(texts) == 0 {
		return nil, nil, fmt.Errorf("%s: no texts", path)
	}
	return texts, counts, nil
}
