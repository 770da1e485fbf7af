package preprocess

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"
)

// TestTokenizerSetSharesIdenticalBytes: loads of the same tokenizer.json
// bytes share one Tokenizer while it is in use, other bytes get their own,
// invalid bytes are an error (and kept nowhere), and an entry goes once no
// assets hold its Tokenizer.
func TestTokenizerSetSharesIdenticalBytes(t *testing.T) {
	// A byte-level BPE needs a symbol for each byte: GPT-2's alphabet maps
	// the printable ones to themselves and the rest to U+0100 on.
	vocab := map[string]int{}
	for b, next := 0, 0; b < 256; b++ {
		r := rune(b)
		if b < '!' || b > '~' && b < 0xa1 || b == 0xad {
			r = rune(256 + next)
			next++
		}
		vocab[string(r)] = len(vocab)
	}
	vocab["ab"], vocab["ba"] = 256, 257
	file := func(merge string) []byte {
		v, err := json.Marshal(vocab)
		if err != nil {
			t.Fatal(err)
		}
		const bytelevel = `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`
		return []byte(`{"pre_tokenizer":` + bytelevel + `,"decoder":` + bytelevel +
			`,"model":{"type":"BPE","vocab":` + string(v) + `,"merges":["` + merge + `"]}}`)
	}
	ts := newTokenizerSet()
	entries := func() int {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return len(ts.m)
	}
	// The tokenizers are unreachable once use returns.
	use := func() {
		a, err := ts.load(file("a b"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := ts.load(file("a b"))
		if err != nil || again != a {
			t.Fatalf("second load of the same bytes: %p, %v; want the first tokenizer %p", again, err, a)
		}
		other, err := ts.load(file("b a"))
		if err != nil || other == a {
			t.Fatalf("load of other bytes: %p, %v; want a tokenizer of its own", other, err)
		}
		if got := a.Encode("ab"); len(got) != 1 || got[0] != 256 {
			t.Fatalf(`Encode("ab") = %v, want [256]`, got)
		}
		if _, err := ts.load([]byte(`{"model":`)); err == nil {
			t.Fatal("invalid tokenizer.json loaded")
		}
		if n := entries(); n != 2 {
			t.Fatalf("%d entries, want 2", n)
		}
	}
	use()
	for deadline := time.Now().Add(10 * time.Second); entries() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left after their tokenizers were dropped", entries())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}
