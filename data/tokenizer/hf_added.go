package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// addedTokenJSON is one entry of tokenizer.json's "added_tokens".
type addedTokenJSON struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedVocab finds added tokens in text the way the Hugging Face AddedVocabulary
// does: leftmost-longest matches, tokens with normalized=false on the raw text and
// those with normalized=true on the normalized text. In plain mode a match of a
// special token is dropped (its text stays ordinary text), exactly as
// encode_special_tokens=True does; non-special added tokens still match.
// EncodeText does not split at all.
type addedVocab struct {
	byContent map[string]int32
	raw, norm *addedTrie // nil when empty
}

type addedTrie struct {
	first  [256]bool // bytes that start some token
	root   *trieNode
	tokens []addedTokenJSON
}

type trieNode struct {
	next map[byte]*trieNode
	tok  int // index into tokens + 1; 0: no token ends here
}

func newAddedVocab(list []addedTokenJSON, norm normalizer) (*addedVocab, error) {
	v := &addedVocab{byContent: make(map[string]int32, len(list))}
	var raw, nrm []addedTokenJSON
	for i, a := range list {
		if a.ID < 0 {
			return nil, fmt.Errorf("load added_tokens[%d]: negative id %d", i, a.ID)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("load added_tokens[%d]: empty content", i)
		}
		v.byContent[a.Content] = a.ID
		if a.Normalized && norm != nil {
			// Hugging Face matches normalized tokens by their normalized form.
			a.Content = norm.normalize(a.Content)
			nrm = append(nrm, a)
		} else if a.Normalized {
			nrm = append(nrm, a)
		} else {
			raw = append(raw, a)
		}
	}
	v.raw, v.norm = newAddedTrie(raw), newAddedTrie(nrm)
	return v, nil
}

func newAddedTrie(list []addedTokenJSON) *addedTrie {
	if len(list) == 0 {
		return nil
	}
	t := &addedTrie{root: &trieNode{}, tokens: list}
	for i, a := range list {
		n := t.root
		t.first[a.Content[0]] = true
		for j := 0; j < len(a.Content); j++ {
			if n.next == nil {
				n.next = make(map[byte]*trieNode)
			}
			c, ok := n.next[a.Content[j]]
			if !ok {
				c = &trieNode{}
				n.next[a.Content[j]] = c
			}
			n = c
		}
		if n.tok == 0 {
			n.tok = i + 1
		}
	}
	return t
}

// longestAt returns the index of the longest token that starts at text[i], or -1.
func (t *addedTrie) longestAt(text string, i int) (tok, end int) {
	tok = -1
	n := t.root
	for j := i; j < len(text); j++ {
		n = n.next[text[j]]
		if n == nil {
			break
		}
		if n.tok != 0 {
			tok, end = n.tok-1, j+1
		}
	}
	return tok, end
}

// split calls emit for each piece of text in order: an added token's id, or a run
// of text between them with id -1. normalized selects the trie of tokens with
// normalized=true (text is then already normalized).
func (v *addedVocab) split(text string, plain, normalized bool, emit func(piece string, id int32)) {
	t := v.raw
	if normalized {
		t = v.norm
	}
	if t == nil {
		if text != "" {
			emit(text, -1)
		}
		return
	}
	start := 0 // start of the pending text piece
	for i := 0; i < len(text); i++ {
		if !t.first[text[i]] {
			continue
		}
		k, end := t.longestAt(text, i)
		if k < 0 {
			continue
		}
		a := &t.tokens[k]
		if plain && a.Special {
			i = end - 1 // the match is consumed as text, as Aho-Corasick does
			continue
		}
		s, e := i, end
		if a.SingleWord && (isWordBefore(text, s) || isWordAfter(text, e)) {
			i = end - 1
			continue
		}
		if a.LStrip {
			for s > start {
				r, n := utf8.DecodeLastRuneInString(text[start:s])
				if !unicode.IsSpace(r) {
					break
				}
				s -= n
			}
		}
		if a.RStrip {
			for e < len(text) {
				r, n := utf8.DecodeRuneInString(text[e:])
				if !unicode.IsSpace(r) {
					break
				}
				e += n
			}
		}
		if s > start {
			emit(text[start:s], -1)
		}
		emit(text[s:e], a.ID)
		start = e
		i = e - 1
	}
	if start < len(text) {
		emit(text[start:], -1)
	}
}

func isWordBefore(text string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(text[:i])
	return isWordRune(r)
}

func isWordAfter(text string, i int) bool {
	if i >= len(text) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(text[i:])
	return isWordRune(r)
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
