package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/eval"
	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// Config is hindsightd's configuration. It is decoded strictly from YAML over
// DefaultConfig: an unknown key is an error naming it.
type Config struct {
	// DataDir holds everything the daemon writes: spool/, state/ (the journal) and
	// the lock file.
	DataDir string `yaml:"data_dir"`
	// Listen is the address of the status port (gRPC, gRPC-Web, Connect/HTTP+JSON,
	// gRPC health, reflection, /metrics, /healthz).
	Listen string           `yaml:"listen"`
	Log    LogConfig        `yaml:"log"`
	Model  ModelConfig      `yaml:"model"`
	Spool  SpoolConfig      `yaml:"spool"`
	Valid  ValidationConfig `yaml:"validation"`
	// Backend is the GoMLX backend spec (go:parallelism=-1, xla:/abs/plugin.so); the
	// -backend flag overrides it and GOMLX_BACKEND applies where neither is set.
	Backend string `yaml:"backend"`
	// CompileCache keeps the programs XLA compiles across restarts.
	CompileCache CompileCacheConfig `yaml:"compile_cache"`
	// OutputDir receives the credit output files; empty means <data_dir>/outputs.
	OutputDir string         `yaml:"output_dir"`
	Teacher   teacher.Config `yaml:"teacher"`
	Credit    credit.Config  `yaml:"credit"`
	Train     TrainConfig    `yaml:"train"`
	// Eval lists the suites run after each checkpoint (evals.jsonl, status, metrics).
	Eval eval.Config `yaml:"eval"`
	// Gateway is the OpenAI-compatible chat completions server that records
	// conversations as rollouts (docs/gateway.md); off by default.
	Gateway gateway.Config `yaml:"gateway"`
	// ControlKeysFile lists the SHA-256 hashes of the API keys ControlService
	// (pause, resume) needs, as gateway.keys_file does; empty: none (then the
	// status keys, if any).
	ControlKeysFile string `yaml:"control_keys_file"`
	// StatusKeysFile lists the API keys' hashes (as control_keys_file) that
	// everything else on listen needs: status, metrics, the pages, reflection, and
	// ControlService too when control_keys_file is empty. /healthz and gRPC health
	// stay open for probes. Empty: all open.
	StatusKeysFile string `yaml:"status_keys_file"`
	// StatusTLSCertFile and StatusTLSKeyFile (PEM) serve listen over TLS (≥ 1.2,
	// HTTP/2 by ALPN); both or neither.
	StatusTLSCertFile string `yaml:"status_tls_cert_file"`
	StatusTLSKeyFile  string `yaml:"status_tls_key_file"`
	// EngineHooks tell serving engines (SGLang, vLLM LoRA) about each new
	// checkpoint (docs/gateway.md "Engine hooks").
	EngineHooks []checkpoint.HookConfig `yaml:"engine_hooks"`
	// ShutdownTimeout bounds a stop (SIGTERM, SIGINT) from the signal to the exit:
	// the file and step in hand may finish until closeReserve of it is left, then
	// they are abandoned and the servers stop (docs/running.md "Stopping").
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// DiskFullRetry is how often a write that failed with a full disk (ENOSPC,
	// EDQUOT) is tried again; claiming and checkpointing pause meanwhile.
	DiskFullRetry time.Duration `yaml:"disk_full_retry"`
}

// CompileCacheConfig keeps the programs the XLA backends compile on disk, so that a
// restart (systemd, a crash, a new checkpoint in the gateway) loads them instead of
// compiling again (docs/performance.md "Cold start"). The pure-Go backend compiles
// nothing and ignores it.
type CompileCacheConfig struct {
	// Enabled turns the disk cache on (the default). Off, compile time is still
	// counted in status and the step log.
	Enabled bool `yaml:"enabled"`
	// Dir holds the entries; empty means <data_dir>/state/programs. Several daemons
	// on the same plugin and machine may share one.
	Dir string `yaml:"dir"`
	// MaxBytes bounds the entries' total size; beyond it the least recently used
	// are removed. A SmolLM2 run keeps about 40 MB, the 0.6B shape about 100 MB.
	MaxBytes int64 `yaml:"max_bytes"`
	// Warm executes each program the run used last time once at start, on zero
	// inputs, after loading it (the default): XLA CPU finishes a loaded program's
	// setup on its first execution, which would otherwise be the first step's.
	Warm bool `yaml:"warm"`
}

// LogConfig sets up the zerolog logger.
type LogConfig struct {
	Level  string `yaml:"level"`  // trace, debug, info, warn, error
	Format string `yaml:"format"` // json, console, or auto (console on a terminal)
}

// ModelConfig names the policy.
type ModelConfig struct {
	// Dir is a Hugging Face model directory (config.json, safetensors, tokenizer.json;
	// see docs/models.md "Model directories"). Rollouts must carry its tokenizer's fingerprint
	// and token ids below its vocab_size, unless validation says otherwise. Empty
	// means <data_dir>/model when training, created on first start from InitPreset.
	Dir string `yaml:"dir"`
	// InitPreset and InitTokenizer make the default model (data.InitModel) when Dir
	// is empty and <data_dir>/model does not exist yet.
	InitPreset    string `yaml:"init_preset"`
	InitTokenizer string `yaml:"init_tokenizer"`
	// Precision is the dtype the policy computes in, for scoring, the gateway's
	// generation and training alike: f32 (the default) or bf16 (bfloat16 weights
	// and KV cache, float32 master weights and optimizer; docs/training.md
	// "Precision"). bf16 needs a backend with bfloat16.
	Precision xla.Precision `yaml:"precision"`
}

// SpoolConfig tunes how the spool is watched.
type SpoolConfig struct {
	// Dir is the spool root; empty means <data_dir>/spool.
	Dir string `yaml:"dir"`
	// RescanInterval is how often incoming/ is listed even without a file-system
	// event (fsnotify misses events on some network file systems).
	RescanInterval time.Duration `yaml:"rescan_interval"`
}

// ValidationConfig holds the optional checks that need to know the model.
type ValidationConfig struct {
	// VocabSize rejects token ids ≥ it; 0 checks only for negative ids.
	VocabSize int `yaml:"vocab_size"`
	// Tokenizer is the fingerprint rollouts must carry (docs/design.md); empty skips the check.
	Tokenizer string `yaml:"tokenizer"`
}

// DefaultConfig returns the embedded defaults: everything under ./hindsight-data,
// status on 127.0.0.1:7077.
func DefaultConfig() Config {
	return Config{
		DataDir:         "./hindsight-data",
		Listen:          "127.0.0.1:7077",
		Log:             LogConfig{Level: "info", Format: "auto"},
		Model:           ModelConfig{InitPreset: "tiny", InitTokenizer: "bytes", Precision: xla.PrecisionF32},
		Spool:           SpoolConfig{RescanInterval: 2 * time.Second},
		CompileCache:    CompileCacheConfig{Enabled: true, MaxBytes: 2 << 30, Warm: true},
		Teacher:         teacher.DefaultConfig(),
		Credit:          credit.DefaultConfig(),
		Train:           DefaultTrainConfig(),
		Eval:            eval.DefaultConfig(),
		Gateway:         gateway.DefaultConfig(),
		EngineHooks:     []checkpoint.HookConfig{},
		ShutdownTimeout: 30 * time.Second,
		DiskFullRetry:   30 * time.Second,
	}
}

// LoadConfig reads a YAML config file over DefaultConfig and validates it.
func LoadConfig(path string) (Config, error) { return LoadConfigOver(path, DefaultConfig()) }

// LoadConfigOver reads a YAML config file over base (the defaults of a mode such as
// hindsightd -loop: what the file sets wins, what it leaves out keeps base's value)
// and validates it.
func LoadConfigOver(path string, base Config) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := ParseConfigOver(b, base)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes YAML over DefaultConfig, rejecting unknown keys, and validates
// the result.
func ParseConfig(b []byte) (Config, error) { return ParseConfigOver(b, DefaultConfig()) }

// ParseConfigOver decodes YAML over base, rejecting unknown keys, and validates the
// result. A list the YAML sets replaces base's list.
func ParseConfigOver(b []byte, base Config) (Config, error) {
	cfg := base
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return Config{}, fmt.Errorf("decode: %w", err)
	}
	if err := checkConfigNumbers(&doc); err != nil {
		return Config{}, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, configDecodeError(&doc, err)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate checks every field and names the bad one by its YAML path.
func (c *Config) Validate() error {
	if strings.TrimSpace(c.DataDir) == "" {
		return errors.New("data_dir: must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %q is not HOST:PORT: %v", c.Listen, err)
	}
	switch c.Log.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q is not one of trace, debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console", "auto":
	default:
		return fmt.Errorf("log.format: %q is not one of json, console, auto", c.Log.Format)
	}
	if c.CompileCache.MaxBytes < 1<<20 {
		return fmt.Errorf("compile_cache.max_bytes: %d is below the 1 MiB minimum (set compile_cache.enabled: false to keep nothing)", c.CompileCache.MaxBytes)
	}
	if c.Spool.RescanInterval < 10*time.Millisecond {
		return fmt.Errorf("spool.rescan_interval: %s is below the 10ms minimum", c.Spool.RescanInterval)
	}
	if err := c.Model.Precision.Validate(); err != nil {
		return fmt.Errorf("model.precision: %w", err)
	}
	if c.Valid.VocabSize < 0 {
		return fmt.Errorf("validation.vocab_size: %d is negative", c.Valid.VocabSize)
	}
	if (c.StatusTLSCertFile == "") != (c.StatusTLSKeyFile == "") {
		return errors.New("status_tls_cert_file and status_tls_key_file: give both or neither")
	}
	if c.DiskFullRetry <= 0 {
		return fmt.Errorf("disk_full_retry: %s must be positive", c.DiskFullRetry)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("shutdown_timeout: %s must be positive", c.ShutdownTimeout)
	}
	if c.Model.Dir == "" && c.Train.Enabled {
		if c.Model.InitPreset == "" {
			return errors.New("model.init_preset: must not be empty when model.dir is")
		}
		if c.Model.InitTokenizer == "" {
			return errors.New("model.init_tokenizer: must not be empty when model.dir is")
		}
	}
	if err := c.Teacher.Validate("teacher."); err != nil {
		return err
	}
	if err := c.Credit.Validate(); err != nil {
		return fmt.Errorf("credit.%w", err)
	}
	if err := c.Train.Validate("train."); err != nil {
		return err
	}
	if err := c.Gateway.Validate(); err != nil {
		return err
	}
	if err := checkpoint.ValidateHooks(c.EngineHooks); err != nil {
		return err
	}
	if c.abOnEngine() {
		for i, h := range c.EngineHooks {
			if h.Kind != checkpoint.HookVLLMLoRA {
				return fmt.Errorf("engine_hooks[%d].kind %s: gateway.ab with gateway.upstream serves two checkpoints by name; only %s hooks load them so", i, h.Kind, checkpoint.HookVLLMLoRA)
			}
		}
	}
	return c.Eval.Validate("eval.")
}

// SpoolDir returns the spool root.
func (c *Config) SpoolDir() string {
	if c.Spool.Dir != "" {
		return c.Spool.Dir
	}
	return filepath.Join(c.DataDir, "spool")
}

// ModelDir returns the policy's model directory and whether it is the default one
// under the data directory (which the daemon creates when missing).
func (c *Config) ModelDir() (dir string, isDefault bool) {
	if c.Model.Dir != "" {
		return c.Model.Dir, false
	}
	return filepath.Join(c.DataDir, "model"), true
}

// OutputPath returns the folder of credit output files.
func (c *Config) OutputPath() string {
	if c.OutputDir != "" {
		return c.OutputDir
	}
	return filepath.Join(c.DataDir, "outputs")
}

// CheckpointDir returns the checkpoint root (step-NNNNNN/ folders and latest).
func (c *Config) CheckpointDir() string { return filepath.Join(c.DataDir, "checkpoints") }

// StagingDir holds the credit rows of trained rollouts whose file is not published yet.
func (c *Config) StagingDir() string { return filepath.Join(c.DataDir, "state", "credit") }

// TeacherCacheDir is teacher.cache_dir, or <data_dir>/state/teacher-cache.
func (c *Config) TeacherCacheDir() string {
	if c.Teacher.CacheDir != "" {
		return c.Teacher.CacheDir
	}
	return filepath.Join(c.DataDir, "state", "teacher-cache")
}

// CompileCacheDir is compile_cache.dir, or <data_dir>/state/programs; empty when
// the cache is off.
func (c *Config) CompileCacheDir() string {
	switch {
	case !c.CompileCache.Enabled:
		return ""
	case c.CompileCache.Dir != "":
		return c.CompileCache.Dir
	}
	return filepath.Join(c.DataDir, "state", "programs")
}

// JournalPath returns the path of the spool journal.
func (c *Config) JournalPath() string { return filepath.Join(c.DataDir, "state", "journal.jsonl") }

// YAML renders the config as YAML, every default included (hindsightd -print-config).
func (c *Config) YAML() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return b.Bytes(), nil
}

// abOnEngine reports whether the gateway's A/B test runs on an upstream engine:
// then the engine hooks load each candidate under its own model id (the
// gateway's LoadModel) instead of pushing every checkpoint under lora_name.
func (c *Config) abOnEngine() bool {
	return c.Gateway.Enabled && c.Gateway.AB.Enabled && c.Gateway.Upstream != ""
}
