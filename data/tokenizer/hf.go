package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// hfTokenizer is a Hugging Face tokenizer.json byte-level BPE tokenizer (Llama 3,
// Qwen 2/2.5/3, DeepSeek V3, Mistral-Nemo). The pipeline is the one of the Rust
// tokenizers crate: added tokens are split off the raw text, the rest is
// normalized, split off the normalized added tokens, pre-tokenized, and each
// pre-token is run through the BPE model. The post_processor is ignored: no BOS
// or EOS is added.
//
// EncodeText skips both added-token splits and runs the rest on the whole text,
// with textModel in place of model: the BPE model without the ids of added tokens
// (see bpeModel.withoutIDs). An added token's id can be an ordinary vocabulary
// entry too: DeepSeek V3's ids 0–2 ("<｜begin▁of▁sentence｜>" …) are both, but
// spelled with characters outside the ByteLevel alphabet, so no input reaches them,
// and no merge of the three fixture families (Qwen3, Llama 3, DeepSeek V3) yields
// an added id, so there textModel is model. Where a merge does, EncodeText encodes
// that text as the smaller pieces the merge would have joined.
type hfTokenizer struct {
	fingerprint string
	vocabSize   int
	normalizer  normalizer // nil: none
	pre         *preTokenizer
	model       *bpeModel
	textModel   *bpeModel // model without the added tokens' ids; often model itself
	added       *addedVocab
	decoder     decoder  // nil: tokens are joined with spaces, as in Hugging Face
	tokens      []string // id → token text as it appears in tokenizer.json; "" where no token has the id
	hasToken    []bool
	byteDecode  bool // decoder is exactly ByteLevel: decode through rawTokens
	rawTokens   []string
}

// tokenizerJSON is the part of tokenizer.json that encoding reads.
type tokenizerJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

func parseHF(raw []byte) (*hfTokenizer, error) { return parseHFWith(raw, false) }

// parseHFWith is parseHF; onlyRegexp2 runs every pre-tokenizer regex with regexp2
// instead of the hand-written scanners (for tests).
func parseHFWith(raw []byte, onlyRegexp2 bool) (*hfTokenizer, error) {
	var doc tokenizerJSON
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	t := &hfTokenizer{fingerprint: fingerprintOf(raw)}
	var err error
	if t.normalizer, err = parseNormalizer(doc.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(doc.PreTokenizer, onlyRegexp2); err != nil {
		return nil, err
	}
	if t.model, err = parseBPE(doc.Model, t.pre.byteLevel); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(doc.Decoder, "decoder"); err != nil {
		return nil, err
	}
	if t.added, err = newAddedVocab(doc.AddedTokens, t.normalizer); err != nil {
		return nil, err
	}
	addedIDs := make(map[int32]bool, len(doc.AddedTokens))
	for _, a := range doc.AddedTokens {
		addedIDs[a.ID] = true
	}
	t.textModel = t.model.withoutIDs(addedIDs)

	// The id → token table: the model's vocabulary, overridden by added tokens
	// (Hugging Face looks an id up in the added vocabulary first).
	size := len(t.model.idToToken)
	for _, a := range doc.AddedTokens {
		size = max(size, int(a.ID)+1)
	}
	t.vocabSize = size
	t.tokens = make([]string, size)
	t.hasToken = make([]bool, size)
	for id, tok := range t.model.idToToken {
		t.tokens[id], t.hasToken[id] = tok, t.model.hasID[id]
	}
	for _, a := range doc.AddedTokens {
		t.tokens[a.ID], t.hasToken[a.ID] = a.Content, true
	}
	if bl, ok := t.decoder.(byteLevelDecoder); ok && bl == (byteLevelDecoder{}) {
		t.byteDecode = true
		t.rawTokens = make([]string, size)
		for id, tok := range t.tokens {
			t.rawTokens[id] = string(byteLevelTokenBytes(nil, tok))
		}
	}
	return t, nil
}

// encodeMode says which added-token strings encode matches in the text.
type encodeMode uint8

const (
	matchAdded      encodeMode = iota // every added token: Encode
	matchNonSpecial                   // added tokens not marked special: EncodePlain
	matchNone                         // none, and no added id from the model: EncodeText
)

// Encode implements Tokenizer.
func (t *hfTokenizer) Encode(text string) []int32 { return t.encode(text, matchAdded) }

// EncodePlain implements Tokenizer.
func (t *hfTokenizer) EncodePlain(text string) []int32 { return t.encode(text, matchNonSpecial) }

// EncodeText implements Tokenizer.
func (t *hfTokenizer) EncodeText(text string) []int32 { return t.encode(text, matchNone) }

func (t *hfTokenizer) encode(text string, mode encodeMode) []int32 {
	text = validUTF8(text)
	ids := make([]int32, 0, len(text)/3+1)
	var scratch preScratch
	if mode == matchNone {
		// With no added token to split off, the text is one piece, as it is for
		// EncodePlain when it holds no added-token string.
		if t.normalizer != nil {
			text = t.normalizer.normalize(text)
		}
		t.pre.split(text, &scratch, func(word string) {
			ids = t.textModel.encodeWord(ids, word)
		})
		return ids
	}
	plain := mode == matchNonSpecial
	t.added.split(text, plain, false, func(piece string, id int32) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		if t.normalizer != nil {
			piece = t.normalizer.normalize(piece)
		}
		t.added.split(piece, plain, true, func(piece string, id int32) {
			if id >= 0 {
				ids = append(ids, id)
				return
			}
			t.pre.split(piece, &scratch, func(word string) {
				ids = t.model.encodeWord(ids, word)
			})
		})
	})
	return ids
}

// Decode implements Tokenizer.
func (t *hfTokenizer) Decode(ids []int32) (string, error) {
	for i, id := range ids {
		if id < 0 || int(id) >= t.vocabSize || !t.hasToken[id] {
			return "", fmt.Errorf("decode tokens: id %d at position %d is not in the tokenizer's vocabulary of %d ids", id, i, t.vocabSize)
		}
	}
	if t.byteDecode {
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(t.rawTokens[id])
		}
		return validUTF8(b.String()), nil
	}
	toks := make([]string, len(ids))
	for i, id := range ids {
		toks[i] = t.tokens[id]
	}
	if t.decoder == nil {
		return strings.Join(toks, " "), nil
	}
	return validUTF8(strings.Join(t.decoder.decode(toks), "")), nil
}

// SpecialID implements Tokenizer: any added token (special or not) by content.
func (t *hfTokenizer) SpecialID(name string) (int32, bool) {
	id, ok := t.added.byContent[name]
	return id, ok
}

// VocabSize implements Tokenizer.
func (t *hfTokenizer) VocabSize() int { return t.vocabSize }

// Fingerprint implements Tokenizer.
func (t *hfTokenizer) Fingerprint() string { return t.fingerprint }

// jsonType reads the "type" of a tokenizer.json component; null gives "".
func jsonType(raw json.RawMessage, path string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var v struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	if v.Type == "" {
		return "", fmt.Errorf("parse %s: no \"type\"", path)
	}
	return v.Type, nil
}

// unsupported is the load error for a tokenizer.json feature this package does not
// implement.
func unsupported(path, what string) error {
	return fmt.Errorf("load %s: unsupported %s", path, what)
}

var _ Tokenizer = (*hfTokenizer)(nil)
