package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer is a tokenizer.json "normalizer": it rewrites text before
// pre-tokenization. Offsets are not tracked: hindsight needs ids, not alignments.
type normalizer interface {
	normalize(s string) string
}

type unicodeNormalizer struct{ form norm.Form }

func (n unicodeNormalizer) normalize(s string) string { return n.form.String(s) }

type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string { return strings.ToLower(s) }

type sequenceNormalizer []normalizer

func (q sequenceNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// parseNormalizer reads the normalizer at path; null and an empty Sequence give
// nil (no normalization).
func parseNormalizer(raw json.RawMessage, path string) (normalizer, error) {
	typ, err := jsonType(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "":
		return nil, nil
	case "NFC":
		return unicodeNormalizer{norm.NFC}, nil
	case "NFD":
		return unicodeNormalizer{norm.NFD}, nil
	case "NFKC":
		return unicodeNormalizer{norm.NFKC}, nil
	case "NFKD":
		return unicodeNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Sequence":
		seq, err := parseSequence(raw, path, "normalizers", parseNormalizer)
		if err != nil {
			return nil, err
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return sequenceNormalizer(seq), nil
	}
	return nil, unsupported(path, fmt.Sprintf("normalizer type %q (supported: NFC, NFD, NFKC, NFKD, Lowercase, Sequence)", typ))
}

// parseSequence parses the elements listed under key in the "Sequence" element raw
// at path, each with parse at path.key[i], and drops those parse returns as nil
// (elements that do nothing).
func parseSequence[T comparable](raw json.RawMessage, path, key string, parse func(json.RawMessage, string) (T, error)) ([]T, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var items []json.RawMessage
	if list, ok := fields[key]; ok {
		if err := json.Unmarshal(list, &items); err != nil {
			return nil, fmt.Errorf("parse %s.%s: %w", path, key, err)
		}
	}
	var zero T
	var seq []T
	for i, r := range items {
		x, err := parse(r, fmt.Sprintf("%s.%s[%d]", path, key, i))
		if err != nil {
			return nil, err
		}
		if x != zero {
			seq = append(seq, x)
		}
	}
	return seq, nil
}
