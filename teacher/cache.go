package teacher

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Cache keeps LLM hints on disk so that a restart (or the crash replay of docs/design.md)
// does not pay for them again and gets the same text. An entry is a small JSON file
// named by the hex SHA-256 key, under a two-character fan-out directory. Writes are
// atomic (temp file, fsync, rename, fsync dir); a torn or foreign file reads as a
// miss. It is safe for concurrent use by goroutines and processes.
type Cache struct {
	dir string
}

// cacheEntry is the file format of one entry.
type cacheEntry struct {
	Key  string `json:"key"`
	Text string `json:"text"`
}

// OpenCache returns the cache in dir, creating it.
func OpenCache(dir string) (*Cache, error) {
	if err := fsutil.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open hint cache: %w", err)
	}
	return &Cache{dir: dir}, nil
}

// CacheKey returns the key of parts: the hex SHA-256 of their length-prefixed
// concatenation, so no two different part lists share a key.
func CacheKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c *Cache) path(key string) string { return filepath.Join(c.dir, key[:2], key+".json") }

// Get returns the text stored under key. A missing entry is (“”, false, nil); an
// unreadable or corrupt one is (“”, false, err).
func (c *Cache) Get(key string) (string, bool, error) {
	raw, err := os.ReadFile(c.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read hint cache: %w", err)
	}
	var e cacheEntry
	if err := json.Unmarshal(raw, &e); err != nil || e.Key != key {
		return "", false, fmt.Errorf("read hint cache %s: corrupt entry", c.path(key))
	}
	return e.Text, true, nil
}

// Put stores text under key atomically.
func (c *Cache) Put(key, text string) error {
	raw, err := json.Marshal(cacheEntry{Key: key, Text: text})
	if err != nil {
		return fmt.Errorf("write hint cache: %w", err)
	}
	if err := writeFileAtomic(c.path(key), raw); err != nil {
		return fmt.Errorf("write hint cache: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to path through a temp file in the same directory:
// write, fsync, rename, fsync the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := fsutil.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
