package frontend

import (
	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/services/frontend/openai"
)

// logprobOut collects the log probabilities the worker sent with generated
// tokens until a response or chunk takes them.
type logprobOut struct {
	tok     *tokenizer.Tokenizer
	top     int
	pending []openai.TokenLogprob
	// none marks, for each pending entry, a token without a probability
	// (an echoed prompt's first); only the completions shape can say so
	// (null).
	none []bool
	// offset is the text length of the tokens taken so far (text_offset).
	offset int
}

func newLogprobOut(tok *tokenizer.Tokenizer, p genParams) *logprobOut {
	if p.logprobs == nil {
		return nil
	}
	return &logprobOut{tok: tok, top: int(*p.logprobs)}
}

func (l *logprobOut) piece(id uint32) (string, []int) {
	s := l.tok.Decode([]uint32{id})
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return s, b
}

// add records the logprobs of ids; a worker that sent none (or fewer) gets
// no entries for those tokens rather than made-up ones.
func (l *logprobOut) add(ids []uint32, lps []*workerv1.TokenLogprob) {
	if l == nil {
		return
	}
	for i, id := range ids {
		if i >= len(lps) {
			return
		}
		tokStr, b := l.piece(id)
		e := openai.TokenLogprob{Token: tokStr, Logprob: lps[i].GetLogprob(), Bytes: b, TopLogprobs: []openai.TopLogprob{}}
		for k, t := range lps[i].GetTop() {
			if k >= l.top {
				break
			}
			s, tb := l.piece(t.GetTokenId())
			e.TopLogprobs = append(e.TopLogprobs, openai.TopLogprob{Token: s, Logprob: t.GetLogprob(), Bytes: tb})
		}
		l.pending = append(l.pending, e)
		l.none = append(l.none, false)
	}
}

// addPrompt records an echoed prompt's entries before any generated
// token's: its first token without a probability, then each following
// token with lps[i-1] (the worker's prompt log probabilities), or, when
// the worker was not asked for them (lps nil), nothing.
func (l *logprobOut) addPrompt(ids []uint32, lps []*workerv1.TokenLogprob) {
	if l == nil || len(ids) == 0 || (lps == nil && len(ids) > 1) {
		return
	}
	s, b := l.piece(ids[0])
	l.pending = append(l.pending, openai.TokenLogprob{Token: s, Bytes: b})
	l.none = append(l.none, true)
	l.add(ids[1:], lps)
}

// prependPrompt records an echoed prompt's entries (as addPrompt) before
// those already pending.
func (l *logprobOut) prependPrompt(ids []uint32, lps []*workerv1.TokenLogprob) {
	generated, none := l.pending, l.none
	l.pending, l.none = nil, nil
	l.addPrompt(ids, lps)
	l.pending, l.none = append(l.pending, generated...), append(l.none, none...)
}

// take returns the pending entries as a chat logprobs object.
func (l *logprobOut) take() *openai.ChatLogprobs {
	out := &openai.ChatLogprobs{Content: l.pending}
	if out.Content == nil {
		out.Content = []openai.TokenLogprob{}
	}
	l.pending, l.none = nil, nil
	return out
}

// takeCompletion returns the pending entries in the completions shape.
func (l *logprobOut) takeCompletion() *openai.CompletionLogprobs {
	out := &openai.CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []*float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for i, e := range l.pending {
		out.Tokens = append(out.Tokens, e.Token)
		if l.none[i] {
			out.TokenLogprobs, out.TopLogprobs = append(out.TokenLogprobs, nil), append(out.TopLogprobs, nil)
		} else {
			lp := e.Logprob
			out.TokenLogprobs = append(out.TokenLogprobs, &lp)
			top := map[string]float32{}
			for _, t := range e.TopLogprobs {
				top[t.Token] = t.Logprob
			}
			out.TopLogprobs = append(out.TopLogprobs, top)
		}
		out.TextOffset = append(out.TextOffset, l.offset)
		l.offset += len(e.Token)
	}
	l.pending, l.none = nil, nil
	return out
}
