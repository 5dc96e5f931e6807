package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// keys are the accepted API keys' SHA-256 hashes: the keys themselves are never
// stored, compared or logged. A nil *keys accepts every request.
type keys struct {
	hashes [][sha256.Size]byte
}

// loadKeys reads a keys file: one "sha256:<hex>" a line, blank lines and '#'
// comments ignored. An empty path is no authentication.
func loadKeys(path string) (*keys, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read gateway.keys_file: %w", err)
	}
	k := &keys{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hexed, ok := strings.CutPrefix(line, "sha256:")
		raw, err := hex.DecodeString(hexed)
		if !ok || err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("read gateway.keys_file %s: line %d: want sha256:<64 hex digits> (the key's SHA-256, not the key)", path, n)
		}
		k.hashes = append(k.hashes, [sha256.Size]byte(raw))
	}
	if len(k.hashes) == 0 {
		return nil, fmt.Errorf("read gateway.keys_file %s: no keys", path)
	}
	return k, nil
}

// HashKey returns the keys-file line of an API key: "sha256:<hex>".
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// valid reports whether key hashes to one of the accepted hashes (constant time in
// the hash).
func (k *keys) valid(key string) bool {
	sum := sha256.Sum256([]byte(key))
	ok := 0
	for _, h := range k.hashes {
		ok |= subtle.ConstantTimeCompare(sum[:], h[:])
	}
	return ok == 1
}

// require answers 401 to a request without a valid "Authorization: Bearer <key>".
func (k *keys) require(next http.Handler) http.Handler {
	if k == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !k.valid(strings.TrimSpace(key)) {
			code := "invalid_api_key"
			writeError(w, &apiError{status: http.StatusUnauthorized, Message: "missing or invalid API key (Authorization: Bearer <key>)",
				Type: "invalid_request_error", Code: &code})
			return
		}
		next.ServeHTTP(w, r)
	})
}
