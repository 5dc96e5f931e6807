// Package apikey checks API keys against a file of their SHA-256 hashes: the
// gateway's keys (gateway.keys_file) and the control API's (control_keys_file).
// The keys themselves are never stored, compared or logged.
package apikey

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

// Keys are the accepted API keys' SHA-256 hashes. A nil *Keys accepts every
// request.
type Keys struct {
	hashes [][sha256.Size]byte
}

// Load reads a keys file: one "sha256:<hex>" a line, blank lines and '#'
// comments ignored. An empty path is no authentication.
func Load(path, what string) (*Keys, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	k := &Keys{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hexed, ok := strings.CutPrefix(line, "sha256:")
		raw, err := hex.DecodeString(hexed)
		if !ok || err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("read %s %s: line %d: want sha256:<64 hex digits> (the key's SHA-256, not the key)", what, path, n)
		}
		k.hashes = append(k.hashes, [sha256.Size]byte(raw))
	}
	if len(k.hashes) == 0 {
		return nil, fmt.Errorf("read %s %s: no keys", what, path)
	}
	return k, nil
}

// Hash returns the keys-file line of an API key: "sha256:<hex>".
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Valid reports whether key hashes to one of the accepted hashes (constant time in
// the hash).
func (k *Keys) Valid(key string) bool {
	sum := sha256.Sum256([]byte(key))
	ok := 0
	for _, h := range k.hashes {
		ok |= subtle.ConstantTimeCompare(sum[:], h[:])
	}
	return ok == 1
}

// Require answers 401 to a request without a valid "Authorization: Bearer <key>",
// with unauthorized writing the answer; nil *Keys lets every request through.
func (k *Keys) Require(next http.Handler, unauthorized func(http.ResponseWriter)) http.Handler {
	if k == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !k.Valid(strings.TrimSpace(key)) {
			unauthorized(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}
