package frontend

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The 11th turn of a 10-turn chat of about 60k tokens: the chat prefix
// cache's goal is preprocessing (template render and tokenization)
// in <= 1 ms. Each iteration is a conversation of its own whose 10th turn
// went through the cache (untimed) before its 11th is timed, so no
// iteration reuses the prompt of the one before. Besides ns/op (wall time,
// noisy on a shared machine) they report cpu-ns/op: the process's user+system
// CPU time over the timed part, which includes the GC work it causes.

// longChat returns the messages of a 10-turn chat of about 58k tokens,
// named by conv, and the 11th question.
func longChat(conv int) (turns []map[string]any, next map[string]any) {
	turn := strings.Repeat("The locomotive pulled its train across the valley while the passengers watched the river. ", 160)
	turns = []map[string]any{{"role": "system", "content": fmt.Sprintf("You are assistant number %d.", conv)}}
	for i := range 10 {
		turns = append(turns, map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: %s", i, turn)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("Answer %d: %s", i, turn)})
	}
	return turns, map[string]any{"role": "user", "content": "And the 11th question?"}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchmark11thTurn(b *testing.B, budget int64, decode bool) {
	a := qwenAssets(b, qwenTokenizer(b), budget)
	var cpu time.Duration
	conv, tokens := 0, 0
	for b.Loop() {
		b.StopTimer()
		conv++
		turns, next := longChat(conv)
		// The 10th turn: the chat up to its last question.
		if _, err := a.chatPrompt(context.Background(), chatBody(b, turns[:len(turns)-1], nil)); err != nil {
			b.Fatal(err)
		}
		body := chatJSON(b, append(turns, next))
		var req *chatRequest
		if !decode {
			req = mustDecodeChat(b, body)
		}
		// Collect the untimed turn's garbage first, so that its GC work
		// is not charged to the timed one.
		runtime.GC()
		c0 := cpuTime()
		b.StartTimer()
		if decode {
			req = mustDecodeChat(b, body)
		}
		ids, err := a.chatPrompt(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - c0
		tokens = len(ids)
		b.StartTimer()
	}
	b.ReportMetric(float64(tokens), "tokens")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkChatPrompt11thTurn: render and tokenize with the chat prefix
// cache (the request body already decoded, as chatPrompt gets it).
func BenchmarkChatPrompt11thTurn(b *testing.B) { benchmark11thTurn(b, 256<<20, false) }

// BenchmarkChatPrompt11thTurnUncached: the same without the cache (a full
// render and encode).
func BenchmarkChatPrompt11thTurnUncached(b *testing.B) { benchmark11thTurn(b, 0, false) }

// BenchmarkChatRequest11thTurn adds decoding the 300 kB request body.
func BenchmarkChatRequest11thTurn(b *testing.B) { benchmark11thTurn(b, 256<<20, true) }
