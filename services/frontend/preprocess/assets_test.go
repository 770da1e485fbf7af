package preprocess_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard-llm/switchyard/pkg/chattemplate"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer"
	"github.com/switchyard-llm/switchyard/pkg/tokenizer/qwen3"
	"github.com/switchyard-llm/switchyard/services/frontend/preprocess"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAssets: the assets of the embedded Qwen3 tokenizer under configs that
// differ in chat template and BOS token. Encode adds the BOS token only
// when the config asks for it and the text lacks it; Render needs a
// template and renders a generation prompt; a template that does not parse
// is refused by NewAssets.
func TestAssets(t *testing.T) {
	raw, err := qwen3.ReadFile("tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	raw, err = qwen3.ReadFile("tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	qcfg, err := tokenizer.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	const bos = "<|endoftext|>"
	bosID, ok := tok.TokenID(bos)
	if !ok {
		t.Fatalf("the Qwen3 vocabulary lacks %s", bos)
	}
	hello := tok.Encode("hello")
	msgs := []chattemplate.Message{{Role: "user", Content: "hello"}}
	for _, tc := range []struct {
		name         string
		cfg          *tokenizer.Config
		text         string
		wantIDs      []uint32
		wantTemplate bool
		wantErr      bool
	}{
		{name: "no config", cfg: &tokenizer.Config{}, text: "hello", wantIDs: hello},
		{name: "qwen3 config", cfg: qcfg, text: "hello", wantIDs: hello, wantTemplate: true},
		{name: "bos added", cfg: &tokenizer.Config{BOSToken: bos, AddBOSToken: true}, text: "hello",
			wantIDs: append([]uint32{bosID}, hello...)},
		{name: "bos already there", cfg: &tokenizer.Config{BOSToken: bos, AddBOSToken: true}, text: bos + "hello",
			wantIDs: append([]uint32{bosID}, hello...)},
		{name: "bos named, not asked for", cfg: &tokenizer.Config{BOSToken: bos}, text: "hello", wantIDs: hello},
		{name: "template that does not parse", cfg: &tokenizer.Config{ChatTemplate: "{% if %}"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := preprocess.NewAssets(tok, tc.cfg)
			if tc.wantErr {
				if err == nil {
					t.Fatal("NewAssets accepted a template that does not parse")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Encode(tc.text); !slices.Equal(got, tc.wantIDs) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.wantIDs)
			}
			ids, _ := a.EncodeMarks(tc.text)
			if !slices.Equal(ids, tc.wantIDs) {
				t.Errorf("EncodeMarks(%q) ids = %v, want %v", tc.text, ids, tc.wantIDs)
			}
			if a.HasTemplate() != tc.wantTemplate {
				t.Errorf("HasTemplate() = %v, want %v", a.HasTemplate(), tc.wantTemplate)
			}
			text, err := a.Render(msgs, nil, nil)
			if !tc.wantTemplate {
				if err == nil {
					t.Errorf("Render without a template = %q, want an error", text)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text, "hello") || !strings.HasSuffix(text, "<|im_start|>assistant\n") {
				t.Errorf("Render = %q, want the message and the generation prompt", text)
			}
		})
	}
	a, err := preprocess.NewAssets(tok, &tokenizer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := preprocess.NewAssets(tok, &tokenizer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() == b.ID() {
		t.Errorf("two assets share id %d", a.ID())
	}
}
