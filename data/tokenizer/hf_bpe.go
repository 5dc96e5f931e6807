package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// bpeModel is a tokenizer.json BPE "model" for byte-level input: each pre-token's
// bytes start as one symbol each (the ByteLevel alphabet's symbol for the byte),
// and the pair with the lowest merge rank is merged, leftmost first, until no pair
// has a merge.
type bpeModel struct {
	vocab        map[string]int32 // token (ByteLevel symbols) → id
	idToToken    []string
	hasID        []bool
	merges       map[uint64]bpeMerge // left id << 32 | right id
	byteIDs      [256]int32          // the first symbol of each byte; -1: dropped
	ignoreMerges bool                // a pre-token that is in vocab is one id
	unk          int32               // -1: none
	fuseUnk      bool
	drop         map[int32]bool // ids the ignore_merges lookup must not give (see withoutIDs)

	mu    sync.RWMutex
	cache map[string][]int32
}

type bpeMerge struct {
	rank, id int32
}

const (
	bpeCacheMax     = 1 << 17 // entries; the cache is emptied when it is full
	bpeCacheWordMax = 256     // bytes; longer pre-tokens are not cached
)

// bpeJSON is tokenizer.json's "model".
type bpeJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int32  `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

func parseBPE(raw json.RawMessage, byteLevel bool) (*bpeModel, error) {
	var v bpeJSON
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("parse model: %w", err)
	}
	switch {
	case v.Type != "BPE":
		return nil, unsupported("model.type", fmt.Sprintf("model type %q (supported: BPE)", v.Type))
	case v.Dropout != nil && *v.Dropout != 0:
		return nil, unsupported("model.dropout", "BPE dropout (it makes encoding random)")
	case v.ContinuingSubwordPrefix != nil && *v.ContinuingSubwordPrefix != "":
		return nil, unsupported("model.continuing_subword_prefix", "BPE continuing_subword_prefix")
	case v.EndOfWordSuffix != nil && *v.EndOfWordSuffix != "":
		return nil, unsupported("model.end_of_word_suffix", "BPE end_of_word_suffix")
	case !byteLevel:
		return nil, unsupported("model", "BPE without a ByteLevel pre-tokenizer")
	}
	m := &bpeModel{vocab: v.Vocab, ignoreMerges: v.IgnoreMerges, unk: -1, fuseUnk: v.FuseUnk,
		merges: make(map[uint64]bpeMerge, len(v.Merges)), cache: make(map[string][]int32)}
	size := 0
	for tok, id := range v.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("load model.vocab: token %q has negative id %d", tok, id)
		}
		size = max(size, int(id)+1)
	}
	m.idToToken = make([]string, size)
	m.hasID = make([]bool, size)
	for tok, id := range v.Vocab {
		m.idToToken[id], m.hasID[id] = tok, true
	}
	if v.UnkToken != nil {
		id, ok := v.Vocab[*v.UnkToken]
		if !ok {
			return nil, fmt.Errorf("load model.unk_token: %q is not in the vocabulary", *v.UnkToken)
		}
		m.unk = id
	}
	for b := range 256 {
		id, ok := v.Vocab[string(byteToRune[b])]
		switch {
		case ok:
		case v.ByteFallback:
			id, ok = v.Vocab[fmt.Sprintf("<0x%02X>", b)]
			if !ok {
				id = m.unk
			}
		default:
			id = m.unk // -1 without unk: the byte is dropped, as in Hugging Face
		}
		m.byteIDs[b] = id
	}
	for i, r := range v.Merges {
		a, b, err := parseMerge(r)
		if err != nil {
			return nil, fmt.Errorf("load model.merges[%d]: %w", i, err)
		}
		ia, oka := v.Vocab[a]
		ib, okb := v.Vocab[b]
		id, okm := v.Vocab[a+b]
		if !oka || !okb || !okm {
			return nil, fmt.Errorf("load model.merges[%d]: %q + %q: a token is not in the vocabulary", i, a, b)
		}
		key := uint64(ia)<<32 | uint64(ib)
		if _, dup := m.merges[key]; !dup { // the first (lowest) rank wins
			m.merges[key] = bpeMerge{rank: int32(i), id: id}
		}
	}
	return m, nil
}

// withoutIDs returns the model as if the ids in drop were not in its vocabulary:
// merges that make one are never applied, and the ignore_merges lookup skips them,
// so the word is merged from its parts instead. It returns m itself when neither
// can reach an id in drop. The byte symbols stay as they are even when in drop:
// they are the only spelling of their byte.
func (m *bpeModel) withoutIDs(drop map[int32]bool) *bpeModel {
	reach := false
	for _, mg := range m.merges {
		if drop[mg.id] {
			reach = true
			break
		}
	}
	if m.ignoreMerges {
		for id := range drop {
			// The lookup spells words in the ByteLevel alphabet, so only entries
			// spelled in it can be found.
			if int(id) < len(m.idToToken) && m.hasID[id] && isByteLevelSpelling(m.idToToken[id]) {
				reach = true
				break
			}
		}
	}
	if !reach {
		return m
	}
	out := &bpeModel{vocab: m.vocab, idToToken: m.idToToken, hasID: m.hasID,
		merges: make(map[uint64]bpeMerge, len(m.merges)), byteIDs: m.byteIDs, ignoreMerges: m.ignoreMerges,
		unk: m.unk, fuseUnk: m.fuseUnk, drop: drop, cache: make(map[string][]int32)}
	for k, mg := range m.merges {
		if !drop[mg.id] {
			out.merges[k] = mg
		}
	}
	return out
}

// parseMerge reads a merge in either form: "a b" or ["a", "b"].
func parseMerge(raw json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("merge %q is not two tokens separated by one space", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("merge %s is neither \"a b\" nor [\"a\", \"b\"]", raw)
	}
	return pair[0], pair[1], nil
}

// encodeWord appends the ids of one pre-token (raw bytes) to ids.
func (m *bpeModel) encodeWord(ids []int32, word string) []int32 {
	if word == "" {
		return ids
	}
	if len(word) == 1 {
		if id := m.byteIDs[word[0]]; id >= 0 {
			return append(ids, id)
		}
		return ids
	}
	m.mu.RLock()
	hit, ok := m.cache[word]
	m.mu.RUnlock()
	if ok {
		return append(ids, hit...)
	}
	start := len(ids)
	ids = m.encodeUncached(ids, word)
	if len(word) <= bpeCacheWordMax {
		out := append([]int32(nil), ids[start:]...)
		m.mu.Lock()
		if len(m.cache) >= bpeCacheMax {
			clear(m.cache)
		}
		m.cache[strings.Clone(word)] = out
		m.mu.Unlock()
	}
	return ids
}

func (m *bpeModel) encodeUncached(ids []int32, word string) []int32 {
	if m.ignoreMerges {
		if id, ok := m.vocab[byteLevelString(word)]; ok && !m.drop[id] {
			return append(ids, id)
		}
	}
	start := len(ids)
	prevUnk := false
	for i := 0; i < len(word); i++ {
		id := m.byteIDs[word[i]]
		if id < 0 {
			continue
		}
		if id == m.unk && m.fuseUnk && prevUnk {
			continue
		}
		prevUnk = id == m.unk
		ids = append(ids, id)
	}
	syms := ids[start:]
	if len(syms) <= bpeSmallWord {
		n := m.mergeSmall(syms)
		return ids[:start+n]
	}
	n := m.mergeHeap(syms)
	return ids[:start+n]
}

// bpeSmallWord is the longest word (in symbols) merged by the quadratic scan; longer
// ones use the heap.
const bpeSmallWord = 48

// mergeSmall merges syms in place by repeated scans for the lowest-ranked pair and
// returns the new length.
func (m *bpeModel) mergeSmall(syms []int32) int {
	n := len(syms)
	for n > 1 {
		best, bestRank, bestID := -1, int32(1<<31-1), int32(0)
		for i := 0; i+1 < n; i++ {
			if mg, ok := m.merges[uint64(syms[i])<<32|uint64(syms[i+1])]; ok && mg.rank < bestRank {
				best, bestRank, bestID = i, mg.rank, mg.id
			}
		}
		if best < 0 {
			break
		}
		syms[best] = bestID
		copy(syms[best+1:n-1], syms[best+2:n])
		n--
	}
	return n
}

// mergeHeap is the Hugging Face merge loop: a priority queue of candidate merges
// ordered by (rank, position) over a linked list of symbols. It gives the same
// result as mergeSmall in O(n log n).
func (m *bpeModel) mergeHeap(syms []int32) int {
	n := len(syms)
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := range n {
		prev[i], next[i], alive[i] = int32(i-1), int32(i+1), true
	}
	next[n-1] = -1
	var q mergeQueue
	push := func(pos int32) {
		r := next[pos]
		if r < 0 {
			return
		}
		if mg, ok := m.merges[uint64(syms[pos])<<32|uint64(syms[r])]; ok {
			q.push(mergeItem{rank: mg.rank, pos: pos, id: mg.id})
		}
	}
	for i := range n - 1 {
		push(int32(i))
	}
	for len(q) > 0 {
		top := q.pop()
		if !alive[top.pos] {
			continue
		}
		r := next[top.pos]
		if r < 0 {
			continue
		}
		mg, ok := m.merges[uint64(syms[top.pos])<<32|uint64(syms[r])]
		if !ok || mg.id != top.id || mg.rank != top.rank {
			continue // stale: a neighbour changed since this entry was queued
		}
		syms[top.pos] = top.id
		alive[r] = false
		next[top.pos] = next[r]
		if nr := next[r]; nr >= 0 {
			prev[nr] = top.pos
		}
		if p := prev[top.pos]; p >= 0 {
			push(p)
		}
		push(top.pos)
	}
	k := 0
	for i := 0; i >= 0 && i < n; i = int(next[i]) {
		syms[k] = syms[i]
		k++
	}
	return k
}

type mergeItem struct {
	rank, pos, id int32
}

func (a mergeItem) less(b mergeItem) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// mergeQueue is a binary min-heap of mergeItem.
type mergeQueue []mergeItem

func (q *mergeQueue) push(it mergeItem) {
	*q = append(*q, it)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *mergeQueue) pop() mergeItem {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, s := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].less(h[s]) {
			s = l
		}
		if r < len(h) && h[r].less(h[s]) {
			s = r
		}
		if s == i {
			break
		}
		h[i], h[s] = h[s], h[i]
		i = s
	}
	*q = h
	return top
}
