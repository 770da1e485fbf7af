package tokenizer

import (
	"strings"
	"testing"
)

// benchText is a mixed multilingual text: the reference lines (English,
// code, numbers, Russian, Chinese, Japanese, Korean, emoji) joined.
func benchText(b *testing.B) string {
	b.Helper()
	var sb strings.Builder
	for _, c := range readJSONL[tokenCase](b, "reference-tokens.jsonl") {
		sb.WriteString(c.Text)
		sb.WriteByte('\n')
	}
	return sb.String()
}

func BenchmarkEncode(b *testing.B) {
	tok := qwen3(b)
	text := benchText(b)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		ids = tok.AppendEncode(ids[:0], text)
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeColdCache clears the merge cache before every pass, the
// worst case of text never seen before.
func BenchmarkEncodeColdCache(b *testing.B) {
	tok := qwen3(b)
	text := benchText(b)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.cache = newWordCache(cacheSlots)
		ids = tok.AppendEncode(ids[:0], text)
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkDecode(b *testing.B) {
	tok := qwen3(b)
	ids := tok.Encode(benchText(b))
	b.ResetTimer()
	for b.Loop() {
		_ = tok.Decode(ids)
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load("qwen3/tokenizer.json.gz"); err != nil {
			b.Fatal(err)
		}
	}
}
