package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/xla"
	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, yaml, err string
		check           func(t *testing.T, c Config)
	}{
		{name: "empty is the defaults", yaml: "", check: func(t *testing.T, c Config) {
			require.Equal(t, DefaultConfig(), c)
		}},
		{name: "overrides", yaml: "data_dir: /var/lib/hindsight\nlisten: 0.0.0.0:9000\nspool:\n  rescan_interval: 500ms\nvalidation:\n  vocab_size: 151936\n",
			check: func(t *testing.T, c Config) {
				require.Equal(t, "/var/lib/hindsight", c.DataDir)
				require.Equal(t, "0.0.0.0:9000", c.Listen)
				require.Equal(t, 500*time.Millisecond, c.Spool.RescanInterval)
				require.Equal(t, 151936, c.Valid.VocabSize)
				require.Equal(t, "info", c.Log.Level, "unset keys keep their defaults")
				require.Equal(t, "/var/lib/hindsight/spool", c.SpoolDir())
			}},
		{name: "unknown top-level key", yaml: "data_dri: x\n", err: `data_dri: unknown key (line 1)`},
		{name: "unknown nested key", yaml: "spool:\n  rescan: 1s\n", err: `spool.rescan: unknown key (line 2)`},
		{name: "bad duration", yaml: "spool:\n  rescan_interval: soon\n", err: `spool.rescan_interval: want a duration such as 5s, 500ms or 10m, got "soon" (line 2)`},
		{name: "duration without unit", yaml: "shutdown_timeout: 5\n", err: `shutdown_timeout: want a duration such as 5s, 500ms or 10m, got "5" (line 1)`},
		{name: "word for an integer", yaml: "data_dir: x\ntrain:\n  token_budget: lots\n", err: `train.token_budget: want an integer, got "lots" (line 3)`},
		{name: "fraction for an integer", yaml: "train:\n  token_budget: 1.5\n", err: `train.token_budget: want an integer, got "1.5" (line 2)`},
		{name: "two keys on a line", yaml: "train: {checkpoint: {every_steps: 0, every: 0}}\n", err: `train.checkpoint.every: want a duration such as 5s, 500ms or 10m, got "0" (line 1)`},
		{name: "list item", yaml: "eval:\n  suites:\n    - {name: a, kind: toolworld, tasks: x}\n", err: `eval.suites[0].tasks: want an integer, got "x" (line 3)`},
		{name: "scalar for a section", yaml: "train: 3\n", err: `train: want a mapping of keys to values, got "3" (line 1)`},
		{name: "list for a bool", yaml: "train:\n  enabled: [1]\n", err: `train.enabled: want true or false, got a list (line 2)`},
		{name: "self-decoding type", yaml: "train:\n  devices: many\n", err: `train.devices: "many": want a device count ≥ 1 or all (line 2)`},
		{name: "two errors", yaml: "train:\n  token_budget: lots\n  seed: x\n", err: `train.token_budget: want an integer, got "lots" (line 2); train.seed: want an integer, got "x" (line 3)`},
		{name: "bad listen", yaml: "listen: localhost\n", err: "listen:"},
		{name: "bad level", yaml: "log:\n  level: loud\n", err: "log.level:"},
		{name: "bad format", yaml: "log:\n  format: xml\n", err: "log.format:"},
		{name: "tiny rescan", yaml: "spool:\n  rescan_interval: 1ns\n", err: "spool.rescan_interval:"},
		{name: "tiny compile cache", yaml: "compile_cache:\n  max_bytes: 1000\n", err: "compile_cache.max_bytes: 1000 is below the 1 MiB minimum"},
		{name: "compile cache", yaml: "data_dir: /d\ncompile_cache:\n  max_bytes: 104857600\n", check: func(t *testing.T, c Config) {
			require.Equal(t, "/d/state/programs", c.CompileCacheDir())
			require.Equal(t, int64(100<<20), c.CompileCache.MaxBytes)
			c.CompileCache.Enabled = false
			require.Empty(t, c.CompileCacheDir())
		}},
		{name: "negative vocab", yaml: "validation:\n  vocab_size: -1\n", err: "validation.vocab_size:"},
		{name: "empty data dir", yaml: "data_dir: ''\n", err: "data_dir:"},
		{name: "zero shutdown", yaml: "shutdown_timeout: 0s\n", err: "shutdown_timeout:"},
		{name: "batch bounds", yaml: "train:\n  max_batch_rollouts: 0\n  max_batch_tokens: 32768\n", check: func(t *testing.T, c Config) {
			require.Equal(t, 0, c.Train.MaxBatchRollouts)
			require.Equal(t, 32768, c.Train.MaxBatchTokens)
		}},
		{name: "exact backprop", yaml: "train:\n  backprop: exact\n", check: func(t *testing.T, c Config) {
			require.Equal(t, xla.BackpropExact, c.Train.Backprop)
		}},
		{name: "bad backprop", yaml: "train:\n  backprop: sideways\n", err: `train.backprop: "sideways", want truncated, exact or full`},
		{name: "bad precision", yaml: "model:\n  precision: fp8\n", err: `model.precision: "fp8", want f32 or bf16`},
		{name: "distill mode topk on the device", yaml: "credit:\n  distill:\n    mode: topk\n    top_k: 20\n", check: func(t *testing.T, c Config) {
			require.Equal(t, credit.DistillTopK, c.Credit.Distill.Mode)
			require.Equal(t, 20, c.Credit.Distill.TopK)
		}},
		{name: "negative batch rollouts", yaml: "train:\n  max_batch_rollouts: -1\n", err: "train.max_batch_rollouts: -1"},
		{name: "status tls half", yaml: "status_tls_cert_file: /c.pem\n", err: "status_tls_cert_file and status_tls_key_file: give both or neither"},
		{name: "gateway upstream without model", yaml: "gateway:\n  enabled: true\n  upstream: http://127.0.0.1:8000/v1\n", err: "gateway.upstream_model: empty"},
		{name: "gateway ab share", yaml: "gateway:\n  enabled: true\n  ab: {enabled: true, share: 2}\n", err: "gateway.ab.share 2: want 0 < share < 1"},
		{name: "gateway ab unknown key", yaml: "gateway:\n  enabled: true\n  ab: {enabled: true, shares: 0.2}\n", err: "gateway.ab.shares: unknown key"},
		{name: "gateway ab on an engine with an sglang hook", yaml: "gateway:\n  enabled: true\n  upstream: http://127.0.0.1:8000/v1\n  upstream_model: m\n  ab: {enabled: true}\nengine_hooks: [{kind: sglang, url: http://127.0.0.1:30000}]\n",
			err: "engine_hooks[0].kind sglang: gateway.ab with gateway.upstream"},
		{name: "gateway upstream not a URL", yaml: "gateway:\n  enabled: true\n  upstream: 127.0.0.1:8000\n  upstream_model: m\n", err: "gateway.upstream \"127.0.0.1:8000\""},
		{name: "negative batch tokens", yaml: "train:\n  max_batch_tokens: -5\n", err: "train.max_batch_tokens: -5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.yaml))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func TestConfigYAMLRoundTrip(t *testing.T) {
	c := DefaultConfig()
	c.Valid.Tokenizer = "bytes-v1"
	b, err := c.YAML()
	require.NoError(t, err)
	require.Contains(t, string(b), "rescan_interval: 2s")
	require.Contains(t, string(b), "ema_rate: 0.05", "the EMA teacher's default rate is SDPO's")
	back, err := ParseConfig(b)
	require.NoError(t, err)
	require.Equal(t, c, back)
}

func TestExampleConfigParses(t *testing.T) {
	c, err := LoadConfig(filepath.Join("..", "deploy", "hindsightd.example.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, c.DataDir)
	_, err = LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	l, err := lockDataDir(dir)
	require.NoError(t, err)
	_, err = lockDataDir(dir)
	require.ErrorContains(t, err, "another hindsightd")
	require.NoError(t, l.release())
	require.NoFileExists(t, filepath.Join(dir, "LOCK"), "an exit leaves no LOCK")
	l, err = lockDataDir(dir)
	require.NoError(t, err)

	// A second daemon that opened LOCK just before the first removed it and let go
	// must not lock the removed file while a third locks the new one.
	stale, err := os.Open(filepath.Join(dir, "LOCK"))
	require.NoError(t, err)
	defer stale.Close()
	require.NoError(t, l.release())
	l, err = lockDataDir(dir)
	require.NoError(t, err)
	held, err := l.f.Stat()
	require.NoError(t, err)
	old, err := stale.Stat()
	require.NoError(t, err)
	require.False(t, os.SameFile(held, old), "the lock is on the file at LOCK now")
	require.NoError(t, l.release())
}
