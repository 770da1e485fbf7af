package frontend

import (
	"errors"
	"testing"
)

// FuzzDecodeEmbeddings feeds the /v1/embeddings decoder anything: an error
// is always the client's (a 400), and an accepted request has a model and
// 1 to maxEmbeddingInputs inputs, none empty, in one form.
func FuzzDecodeEmbeddings(f *testing.F) {
	for _, b := range []string{
		`{"model":"m","input":"hello"}`,
		`{"model":"m","input":["a","b"],"encoding_format":"base64"}`,
		`{"model":"m","input":[1,2,3],"dimensions":8}`,
		`{"model":"m","input":[[1],[2,3]],"user":"u"}`,
		`{"model":"m","input":[]}`,
		`{"model":"m","input":["a",1]}`,
		`{"model":"m","input":"a","dimensions":-1}`,
		`{"model":"m","input":"a","extra":1}`,
		`[1]`,
	} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodeEmbeddings(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not an invalid request", err)
			}
			return
		}
		n := len(p.texts) + len(p.ids)
		if p.model == "" || n == 0 || n > maxEmbeddingInputs || (len(p.texts) > 0 && len(p.ids) > 0) {
			t.Fatalf("accepted an invalid request: %+v", p)
		}
		for _, s := range p.texts {
			if s == "" {
				t.Fatal("accepted an empty string")
			}
		}
		for _, ids := range p.ids {
			if len(ids) == 0 {
				t.Fatal("accepted an empty token list")
			}
		}
		if p.dimensions != nil && *p.dimensions == 0 {
			t.Fatal("accepted zero dimensions")
		}
	})
}
