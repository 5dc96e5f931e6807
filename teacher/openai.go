package teacher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// OpenAIConfig configures the LLM teacher: any server that speaks OpenAI chat
// completions (vLLM, SGLang, llama.cpp, Ollama, hosted APIs).
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. http://127.0.0.1:8000/v1.
	BaseURL string `yaml:"base_url"`
	Model   string `yaml:"model"`
	// APIKeyEnv names the environment variable that holds the API key; APIKeyFile is
	// a file holding it (white space trimmed). At most one; neither for servers that
	// need no key. The key itself is never in the config and never logged.
	APIKeyEnv  string `yaml:"api_key_env"`
	APIKeyFile string `yaml:"api_key_file"`
	// SystemPrompt is the system message; PromptTemplate the user message, a Go
	// text/template over PromptData. Empty: DefaultSystemPrompt / DefaultPromptTemplate.
	SystemPrompt   string `yaml:"system_prompt"`
	PromptTemplate string `yaml:"prompt_template"`
	// MaxContextTokens is the budget, in policy tokens, of rollout text in a prompt.
	MaxContextTokens int `yaml:"max_context_tokens"`
	// MaxHintTokens is sent as max_tokens; a reply cut at it (finish_reason "length")
	// or longer than it in policy tokens fails as too_long.
	MaxHintTokens int     `yaml:"max_hint_tokens"`
	Temperature   float64 `yaml:"temperature"`
	// Concurrency caps requests in flight, over all rollouts.
	Concurrency int `yaml:"concurrency"`
	// Timeout bounds one request attempt.
	Timeout time.Duration `yaml:"timeout"`
	// Retries is how many times a request is retried after a timeout, 429, 5xx, reset
	// or malformed reply. The wait before retry n (0-based) is drawn uniformly from
	// [d/2, d], d = min(Backoff·2^n, MaxBackoff), and is at least the server's
	// Retry-After; a Retry-After over MaxRetryAfter is not waited for: the request
	// fails at once.
	Retries       int           `yaml:"retries"`
	Backoff       time.Duration `yaml:"backoff"`
	MaxBackoff    time.Duration `yaml:"max_backoff"`
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
	Breaker       BreakerConfig `yaml:"breaker"`
}

// DefaultOpenAIConfig returns the client defaults; BaseURL and Model must be set.
func DefaultOpenAIConfig() OpenAIConfig {
	return OpenAIConfig{
		MaxContextTokens: 4096,
		MaxHintTokens:    128,
		Concurrency:      4,
		Timeout:          60 * time.Second,
		Retries:          3,
		Backoff:          500 * time.Millisecond,
		MaxBackoff:       10 * time.Second,
		MaxRetryAfter:    30 * time.Second,
		Breaker:          BreakerConfig{Failures: 5, Cooldown: 30 * time.Second},
	}
}

// Validate reports the first bad field, named by its YAML path under prefix.
func (c OpenAIConfig) Validate(prefix string) error {
	if c.BaseURL == "" {
		return fmt.Errorf("%sbase_url: required (e.g. http://127.0.0.1:8000/v1)", prefix)
	}
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%sbase_url: want an http(s) URL, got %q", prefix, c.BaseURL)
	}
	if c.Model == "" {
		return fmt.Errorf("%smodel: required", prefix)
	}
	if c.APIKeyEnv != "" && c.APIKeyFile != "" {
		return fmt.Errorf("%sapi_key_file: set api_key_env or api_key_file, not both", prefix)
	}
	if c.PromptTemplate != "" {
		if _, err := parsePromptTemplate(c.PromptTemplate); err != nil {
			return fmt.Errorf("%sprompt_template: %w", prefix, err)
		}
	}
	switch {
	case c.MaxContextTokens < 64:
		return fmt.Errorf("%smax_context_tokens: must be ≥ 64, got %d", prefix, c.MaxContextTokens)
	case c.MaxHintTokens < 1:
		return fmt.Errorf("%smax_hint_tokens: must be ≥ 1, got %d", prefix, c.MaxHintTokens)
	case c.Temperature < 0 || c.Temperature > 2:
		return fmt.Errorf("%stemperature: must be in [0, 2], got %g", prefix, c.Temperature)
	case c.Concurrency < 1:
		return fmt.Errorf("%sconcurrency: must be ≥ 1, got %d", prefix, c.Concurrency)
	case c.Timeout <= 0:
		return fmt.Errorf("%stimeout: must be > 0, got %s", prefix, c.Timeout)
	case c.Retries < 0:
		return fmt.Errorf("%sretries: must be ≥ 0, got %d", prefix, c.Retries)
	case c.Backoff <= 0:
		return fmt.Errorf("%sbackoff: must be > 0, got %s", prefix, c.Backoff)
	case c.MaxBackoff < c.Backoff:
		return fmt.Errorf("%smax_backoff: must be ≥ backoff (%s), got %s", prefix, c.Backoff, c.MaxBackoff)
	case c.MaxRetryAfter < 0:
		return fmt.Errorf("%smax_retry_after: must be ≥ 0, got %s", prefix, c.MaxRetryAfter)
	}
	return c.Breaker.Validate(prefix + "breaker.")
}

// OpenAIDeps are what an OpenAITeacher needs from its owner.
type OpenAIDeps struct {
	Tokenizer  tokenizer.Tokenizer // the policy's: decodes context, measures hints
	Logger     zerolog.Logger
	Stats      *Stats       // nil: a private one
	Cache      *Cache       // nil: no cache
	HTTPClient *http.Client // nil: a plain one
}

// OpenAITeacher asks an OpenAI-compatible chat-completions server for hints. It is
// safe for concurrent use; its concurrency limit and breaker are shared by all calls.
type OpenAITeacher struct {
	cfg      OpenAIConfig
	tok      tokenizer.Tokenizer
	log      zerolog.Logger
	stats    *Stats
	cache    *Cache
	client   openai.Client
	prompt   *template.Template
	system   string
	configID string // the part of the cache key that names the teacher config
	sem      chan struct{}
	breaker  *breaker
	sleep    func(ctx context.Context, d time.Duration) error
}

// NewOpenAITeacher returns the teacher cfg describes. It reads the API key now, from
// the environment variable or file the config names.
func NewOpenAITeacher(cfg OpenAIConfig, deps OpenAIDeps) (*OpenAITeacher, error) {
	if err := cfg.Validate("openai."); err != nil {
		return nil, err
	}
	if deps.Tokenizer == nil {
		return nil, errors.New("new openai teacher: no tokenizer")
	}
	key, err := readAPIKey(cfg)
	if err != nil {
		return nil, err
	}
	if deps.Stats == nil {
		deps.Stats = &Stats{}
	}
	if deps.HTTPClient == nil {
		deps.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if cfg.SystemPrompt == "" {
		cfg.SystemPrompt = DefaultSystemPrompt
	}
	if cfg.PromptTemplate == "" {
		cfg.PromptTemplate = DefaultPromptTemplate
	}
	prompt, err := parsePromptTemplate(cfg.PromptTemplate)
	if err != nil {
		return nil, fmt.Errorf("openai.prompt_template: %w", err)
	}
	t := &OpenAITeacher{
		cfg:    cfg,
		tok:    deps.Tokenizer,
		log:    deps.Logger.With().Str("teacher", "openai").Str("model", cfg.Model).Logger(),
		stats:  deps.Stats,
		cache:  deps.Cache,
		prompt: prompt,
		system: cfg.SystemPrompt,
		configID: CacheKey("openai-v1", cfg.Model, cfg.SystemPrompt, cfg.PromptTemplate,
			strconv.Itoa(cfg.MaxContextTokens), strconv.Itoa(cfg.MaxHintTokens),
			strconv.FormatFloat(cfg.Temperature, 'g', -1, 64), deps.Tokenizer.Fingerprint()),
		sem:   make(chan struct{}, cfg.Concurrency),
		sleep: sleepCtx,
	}
	t.breaker = newBreaker(cfg.Breaker, t.breakerChanged)
	t.stats.breakerState.Store(breakerClosed.String())
	// The client's own retries and timeouts are off: this teacher retries, times out
	// and counts every attempt itself. Options after the defaults override any
	// OPENAI_API_KEY / OPENAI_BASE_URL in the environment.
	t.client = openai.NewClient(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(key),
		option.WithHTTPClient(deps.HTTPClient),
		option.WithMaxRetries(0),
	)
	return t, nil
}

// readAPIKey returns the key the config points at. Errors name the variable or file,
// never the key.
func readAPIKey(cfg OpenAIConfig) (string, error) {
	switch {
	case cfg.APIKeyEnv != "":
		key := strings.TrimSpace(os.Getenv(cfg.APIKeyEnv))
		if key == "" {
			return "", fmt.Errorf("openai.api_key_env: environment variable %s is empty or unset", cfg.APIKeyEnv)
		}
		return key, nil
	case cfg.APIKeyFile != "":
		raw, err := os.ReadFile(cfg.APIKeyFile)
		if err != nil {
			return "", fmt.Errorf("openai.api_key_file: %w", err)
		}
		key := strings.TrimSpace(string(raw))
		if key == "" {
			return "", fmt.Errorf("openai.api_key_file: %s is empty", cfg.APIKeyFile)
		}
		return key, nil
	}
	return "", nil
}

func (t *OpenAITeacher) breakerChanged(from, to breakerState) {
	t.stats.breakerState.Store(to.String())
	if to == breakerOpen {
		t.stats.breakerOpens.Add(1)
		t.log.Warn().Str("from", from.String()).Dur("cooldown", t.cfg.Breaker.Cooldown).Msg("teacher circuit breaker open")
	} else {
		t.log.Info().Str("from", from.String()).Str("to", to.String()).Msg("teacher circuit breaker")
	}
}

// Name returns "openai".
func (*OpenAITeacher) Name() string { return "openai" }

// Hints implements Teacher: one request per selection, run concurrently under the
// teacher's concurrency limit.
func (t *OpenAITeacher) Hints(ctx context.Context, r *rollout.Rollout, sels []Selection) ([]Hint, error) {
	out := make([]Hint, len(sels))
	var wg sync.WaitGroup
	for i, s := range sels {
		out[i] = Hint{Selection: s, Source: "openai"}
		wg.Go(func() {
			out[i].Text, out[i].Cached, out[i].Err = t.hint(ctx, r, s)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// hint returns the hint for one selection: from the cache, else from the server.
func (t *OpenAITeacher) hint(ctx context.Context, r *rollout.Rollout, sel Selection) (text string, cached bool, err error) {
	var prompt strings.Builder
	if err := t.prompt.Execute(&prompt, t.promptData(r, sel)); err != nil {
		return "", false, &Failure{Kind: FailOther, Err: fmt.Errorf("render prompt: %w", err)}
	}
	key := CacheKey(t.configID, t.system, prompt.String())
	if t.cache != nil {
		text, ok, err := t.cache.Get(key)
		switch {
		case err != nil:
			t.stats.cacheErrors.Add(1)
			t.log.Warn().Err(err).Msg("hint cache entry unreadable; asking the server")
		case ok:
			t.stats.cacheHits.Add(1)
			return text, true, nil
		default:
			t.stats.cacheMisses.Add(1)
		}
	}
	text, err = t.complete(ctx, prompt.String())
	if err != nil {
		return "", false, err
	}
	if t.cache != nil {
		if err := t.cache.Put(key, text); err != nil {
			t.stats.cacheErrors.Add(1)
			t.log.Warn().Err(err).Msg("hint not cached")
		}
	}
	return text, false, nil
}
