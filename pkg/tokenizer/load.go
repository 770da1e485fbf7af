package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnsupported is returned, wrapped, when tokenizer.json uses a model,
// normalizer, pre-tokenizer or decoder this package does not implement.
var ErrUnsupported = errors.New("tokenizer: unsupported configuration")

// ErrInvalid is returned, wrapped, when tokenizer.json or
// tokenizer_config.json is malformed or inconsistent.
var ErrInvalid = errors.New("tokenizer: invalid file")

type fileJSON struct {
	AddedTokens  []addedTokenJSON `json:"added_tokens"`
	Normalizer   json.RawMessage  `json:"normalizer"`
	PreTokenizer json.RawMessage  `json:"pre_tokenizer"`
	Decoder      json.RawMessage  `json:"decoder"`
	Model        modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
}

type componentJSON struct {
	Type string `json:"type"`
	// Sequence members.
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	// Split.
	Pattern  *patternJSON `json:"pattern"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`
	// ByteLevel.
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// Load reads a Hugging Face tokenizer.json, plain or gzip-compressed (the
// name ending in .gz or not: the content decides).
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := LoadReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// LoadReader reads a tokenizer.json from r, gunzipping it when it starts
// with the gzip magic bytes.
func LoadReader(r io.Reader) (*Tokenizer, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrInvalid, err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	var f fileJSON
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: decode tokenizer.json: %w", ErrInvalid, err)
	}
	return build(&f)
}

// Config is the part of a tokenizer_config.json that a frontend needs.
type Config struct {
	// ChatTemplate is the default Jinja chat template, or "" if none.
	ChatTemplate string
	// BOSToken and EOSToken are the beginning and end of sequence token
	// strings, or "" if unset.
	BOSToken string
	EOSToken string
	// AddBOSToken reports whether the model expects BOSToken prepended.
	AddBOSToken bool
}

// LoadConfig reads a tokenizer_config.json.
func LoadConfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses the content of a tokenizer_config.json. The chat
// template may be a string or a list of named templates (the one named
// "default" is used); the bos and eos tokens may be strings or added-token
// objects.
func ParseConfig(raw []byte) (*Config, error) {
	var c struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOSToken     json.RawMessage `json:"bos_token"`
		EOSToken     json.RawMessage `json:"eos_token"`
		AddBOSToken  bool            `json:"add_bos_token"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: decode tokenizer_config.json: %w", ErrInvalid, err)
	}
	out := &Config{AddBOSToken: c.AddBOSToken}
	var err error
	if out.BOSToken, err = tokenString(c.BOSToken); err != nil {
		return nil, fmt.Errorf("%w: bos_token: %w", ErrInvalid, err)
	}
	if out.EOSToken, err = tokenString(c.EOSToken); err != nil {
		return nil, fmt.Errorf("%w: eos_token: %w", ErrInvalid, err)
	}
	if out.ChatTemplate, err = chatTemplate(c.ChatTemplate); err != nil {
		return nil, fmt.Errorf("%w: chat_template: %w", ErrInvalid, err)
	}
	return out, nil
}

func tokenString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", err
	}
	return obj.Content, nil
}

func chatTemplate(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", err
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New("no template named \"default\"")
}

// LoadDir loads a model directory: tokenizer.json (or tokenizer.json.gz)
// and, when present, tokenizer_config.json. The returned Config is empty
// when there is no tokenizer_config.json.
func LoadDir(dir string) (*Tokenizer, *Config, error) {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		path += ".gz"
	}
	t, err := Load(path)
	if err != nil {
		return nil, nil, err
	}
	cfg := &Config{}
	cpath := filepath.Join(dir, "tokenizer_config.json")
	if _, err := os.Stat(cpath); err == nil {
		if cfg, err = LoadConfig(cpath); err != nil {
			return nil, nil, err
		}
	}
	return t, cfg, nil
}

func build(f *fileJSON) (*Tokenizer, error) {
	t := &Tokenizer{}
	if err := t.buildNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := t.buildModel(&f.Model); err != nil {
		return nil, err
	}
	if err := t.buildAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	t.cache = newWordCache(cacheSlots)
	return t, nil
}

func decodeComponent(raw json.RawMessage, what string) (*componentJSON, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, what, err)
	}
	return &c, nil
}

func (t *Tokenizer) buildNormalizer(raw json.RawMessage) error {
	c, err := decodeComponent(raw, "normalizer")
	if err != nil || c == nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.buildNormalizer(n); err != nil {
				return err
			}
		}
		return nil
	case "NFC", "NFKC", "NFD", "NFKD":
		t.normalizers = append(t.normalizers, normForms[c.Type])
		return nil
	}
	return fmt.Errorf("%w: normalizer type %q (supported: Sequence, NFC, NFKC, NFD, NFKD)", ErrUnsupported, c.Type)
}

func (t *Tokenizer) buildPreTokenizer(raw json.RawMessage) error {
	c, err := decodeComponent(raw, "pre_tokenizer")
	if err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("%w: no pre_tokenizer (only byte-level BPE is supported)", ErrUnsupported)
	}
	var parts []*componentJSON
	if c.Type == "Sequence" {
		for _, p := range c.Pretokenizers {
			pc, err := decodeComponent(p, "pre_tokenizer")
			if err != nil {
				return err
			}
			if pc != nil {
				parts = append(parts, pc)
			}
		}
	} else {
		parts = []*componentJSON{c}
	}
	byteLevel := false
	for i, p := range parts {
		switch p.Type {
		case "Split":
			if byteLevel || t.split != nil {
				return fmt.Errorf("%w: pre_tokenizer: Split must come once, before ByteLevel", ErrUnsupported)
			}
			if p.Behavior != "Isolated" || p.Invert {
				return fmt.Errorf("%w: pre_tokenizer: Split behavior %q invert %v (supported: Isolated, not inverted)", ErrUnsupported, p.Behavior, p.Invert)
			}
			if p.Pattern == nil || (p.Pattern.Regex == nil) == (p.Pattern.String == nil) {
				return fmt.Errorf("%w: pre_tokenizer: Split needs a Regex or String pattern", ErrInvalid)
			}
			pattern := ""
			if p.Pattern.Regex != nil {
				pattern = *p.Pattern.Regex
			} else {
				pattern = regexpQuote(*p.Pattern.String)
			}
			if t.split, err = newSplitter(pattern); err != nil {
				return fmt.Errorf("%w: pre_tokenizer: %w", ErrInvalid, err)
			}
		case "ByteLevel":
			if i != len(parts)-1 {
				return fmt.Errorf("%w: pre_tokenizer: ByteLevel must be last", ErrUnsupported)
			}
			byteLevel = true
			t.addPrefixSpace = p.AddPrefixSpace
			// use_regex defaults to true in Hugging Face.
			if p.UseRegex == nil || *p.UseRegex {
				if t.split != nil {
					return fmt.Errorf("%w: pre_tokenizer: Split followed by ByteLevel with use_regex", ErrUnsupported)
				}
				t.split = gpt2Splitter{}
			}
		default:
			return fmt.Errorf("%w: pre_tokenizer type %q (supported: Sequence, Split, ByteLevel)", ErrUnsupported, p.Type)
		}
	}
	if !byteLevel {
		return fmt.Errorf("%w: pre_tokenizer without ByteLevel (only byte-level BPE is supported)", ErrUnsupported)
	}
	if t.split == nil {
		t.split = wholeSplitter{}
	}
	return nil
}

// regexpQuote escapes s for regexp2.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$#&-~ `, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func checkDecoder(raw json.RawMessage) error {
	c, err := decodeComponent(raw, "decoder")
	if err != nil {
		return err
	}
	if c == nil || c.Type != "ByteLevel" {
		typ := "none"
		if c != nil {
			typ = fmt.Sprintf("%q", c.Type)
		}
		return fmt.Errorf("%w: decoder type %s (supported: ByteLevel)", ErrUnsupported, typ)
	}
	return nil
}

// wholeSplitter keeps a segment as one piece (ByteLevel with use_regex
// false and no Split).
type wholeSplitter struct{}

func (wholeSplitter) appendEnds(s string, ends []int) []int { return append(ends, len(s)) }
