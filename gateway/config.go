package gateway

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config is the `gateway:` section of hindsightd's configuration.
type Config struct {
	// Enabled starts the gateway (off by default).
	Enabled bool `yaml:"enabled"`
	// Listen is the gateway's own address (port 0 picks a free one).
	Listen string `yaml:"listen"`
	// ModelName is the model id GET /v1/models lists and requests must name.
	ModelName string `yaml:"model_name"`
	// UnrecordedModel is a second model id answered by the same policy without
	// recording the conversation: what the policy's own teacher names
	// (teacher.openai.model), so its calls do not become rollouts. Empty: none.
	UnrecordedModel string `yaml:"unrecorded_model"`
	// KeysFile holds the API keys' SHA-256 hashes, one "sha256:<hex>" a line ('#'
	// comments allowed); empty: no authentication.
	KeysFile string `yaml:"keys_file"`
	// IdleTimeout ends a session that has had no request this long: it is written
	// to the spool as a rollout.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// FeedbackWindow is how long a closed (or idle-ended) session waits, journaled,
	// before it is written to the spool and can be trained: a rating or comment in
	// the window is in the rollout. 0: written at once. Shutdown writes the waiting
	// sessions as they are.
	FeedbackWindow time.Duration `yaml:"feedback_window"`
	// FeedbackWindowMaxBytes bounds the journals of the sessions waiting out the
	// window; beyond it the oldest are written at once.
	FeedbackWindowMaxBytes int64 `yaml:"feedback_window_max_bytes"`
	// MaxCommentBytes bounds a feedback comment; a longer one is refused (400).
	MaxCommentBytes int `yaml:"max_comment_bytes"`
	// MaxTokens is the default max_tokens of a request that gives none (still
	// bounded by the model's context).
	MaxTokens int `yaml:"max_tokens"`
	// MaxContextTokens bounds the context served (prompt and reply, in tokens)
	// below the model's max_position_embeddings: a longer conversation is refused
	// with 400 context_length_exceeded, and GET /v1/models says the bound
	// (max_model_len).
	MaxContextTokens int `yaml:"max_context_tokens"`
	// MaxRequestBytes bounds a request body.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// MaxPending bounds the chat requests in the gateway at once (sampling or
	// waiting for the sampler, which runs one at a time); one more is refused with
	// 429 instead of queueing without bound.
	MaxPending int `yaml:"max_pending"`
	// MaxBatch bounds the requests sampled together in one batch by the embedded
	// sampler (each answer is what it would be alone); 1: one at a time.
	MaxBatch int `yaml:"max_batch"`
	// TLSCertFile and TLSKeyFile (PEM) make the gateway serve HTTPS; both or
	// neither.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// Upstream is an OpenAI-compatible engine's base URL (vLLM, e.g.
	// http://127.0.0.1:8000/v1) that samples instead of the embedded sampler; empty:
	// the embedded sampler. UpstreamModel is the model id it serves (a LoRA
	// adapter's name for vllm_lora hooks); UpstreamAPIKeyEnv names an environment
	// variable with its API key; UpstreamTimeout bounds one request.
	Upstream          string        `yaml:"upstream"`
	UpstreamModel     string        `yaml:"upstream_model"`
	UpstreamAPIKeyEnv string        `yaml:"upstream_api_key_env"`
	UpstreamTimeout   time.Duration `yaml:"upstream_timeout"`
	// ContentSpecialTokens is what a special-token string (such as "<|im_end|>") in
	// a message's text becomes: "text" (ContentSpecialText, the default) encodes it
	// as the ordinary text it spells, so a message cannot forge a turn in the
	// recorded rollout; "control" (ContentSpecialControl) encodes it as the special
	// token, as apply_chat_template does by default.
	ContentSpecialTokens string `yaml:"content_special_tokens"`
	// ReloadInterval is how often the checkpoint root's `latest` link is looked at;
	// a new checkpoint is swapped in without dropping a request.
	ReloadInterval time.Duration `yaml:"reload_interval"`
	// AB serves a candidate checkpoint beside the default one to a share of new
	// sessions and promotes or rolls it back by rule (ab_config.go).
	AB ABConfig `yaml:"ab"`
}

// DefaultConfig returns the gateway's defaults: off, on 127.0.0.1:7078.
func DefaultConfig() Config {
	return Config{
		Listen:                 "127.0.0.1:7078",
		ModelName:              "hindsight",
		UnrecordedModel:        "policy",
		IdleTimeout:            10 * time.Minute,
		FeedbackWindow:         5 * time.Minute,
		FeedbackWindowMaxBytes: 256 << 20,
		MaxCommentBytes:        8 << 10,
		MaxTokens:              512,
		MaxContextTokens:       8192,
		MaxRequestBytes:        8 << 20,
		MaxPending:             64,
		MaxBatch:               8,
		ReloadInterval:         2 * time.Second,
		ContentSpecialTokens:   ContentSpecialText,
		UpstreamTimeout:        10 * time.Minute,
		AB:                     DefaultABConfig(),
	}
}

// Validate names the first bad field (with its gateway. path).
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	switch {
	case c.Listen == "":
		return errors.New("gateway.listen: empty")
	case c.ModelName == "":
		return errors.New("gateway.model_name: empty")
	case c.UnrecordedModel == c.ModelName:
		return fmt.Errorf("gateway.unrecorded_model %q: the same as model_name", c.UnrecordedModel)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("gateway.idle_timeout %s: want > 0", c.IdleTimeout)
	case c.FeedbackWindow < 0:
		return fmt.Errorf("gateway.feedback_window %s: want ≥ 0", c.FeedbackWindow)
	case c.FeedbackWindowMaxBytes <= 0:
		return fmt.Errorf("gateway.feedback_window_max_bytes %d: want > 0", c.FeedbackWindowMaxBytes)
	case c.MaxCommentBytes <= 0 || c.MaxCommentBytes > feedbackBodyLimit/2:
		return fmt.Errorf("gateway.max_comment_bytes %d: want in [1, %d]", c.MaxCommentBytes, feedbackBodyLimit/2)
	case c.MaxTokens <= 0:
		return fmt.Errorf("gateway.max_tokens %d: want > 0", c.MaxTokens)
	case c.MaxContextTokens < 2:
		return fmt.Errorf("gateway.max_context_tokens %d: want ≥ 2", c.MaxContextTokens)
	case c.MaxRequestBytes <= 0:
		return fmt.Errorf("gateway.max_request_bytes %d: want > 0", c.MaxRequestBytes)
	case c.MaxBatch <= 0:
		return fmt.Errorf("gateway.max_batch %d: want > 0", c.MaxBatch)
	case c.MaxPending <= 0:
		return fmt.Errorf("gateway.max_pending %d: want > 0", c.MaxPending)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("gateway.tls_cert_file and gateway.tls_key_file: give both or neither")
	case c.Upstream != "" && !strings.HasPrefix(c.Upstream, "http://") && !strings.HasPrefix(c.Upstream, "https://"):
		return fmt.Errorf("gateway.upstream %q: want an http:// or https:// base URL", c.Upstream)
	case c.Upstream != "" && c.UpstreamModel == "":
		return errors.New("gateway.upstream_model: empty (the model id the upstream engine serves)")
	case c.Upstream != "" && c.UpstreamTimeout <= 0:
		return fmt.Errorf("gateway.upstream_timeout %s: want > 0", c.UpstreamTimeout)
	case c.ContentSpecialTokens != ContentSpecialText && c.ContentSpecialTokens != ContentSpecialControl:
		return fmt.Errorf("gateway.content_special_tokens %q: want %q or %q", c.ContentSpecialTokens, ContentSpecialText, ContentSpecialControl)
	case c.ReloadInterval <= 0:
		return fmt.Errorf("gateway.reload_interval %s: want > 0", c.ReloadInterval)
	}
	if err := c.AB.Validate(); err != nil {
		return err
	}
	return nil
}
