package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Hook kinds: what an engine is told when a new checkpoint is written.
const (
	HookSGLang   = "sglang"    // POST <url>/update_weights_from_disk {"model_path": dir}
	HookVLLMLoRA = "vllm_lora" // POST <url>/v1/load_lora_adapter {"lora_name", "lora_path": dir}
)

// HookConfig is one serving engine to tell about new weights (`engine_hooks:`).
type HookConfig struct {
	Kind string `yaml:"kind"` // sglang or vllm_lora
	URL  string `yaml:"url"`  // the engine's base URL, e.g. http://127.0.0.1:30000
	// LoRAName is the adapter name vLLM serves the checkpoint under (vllm_lora).
	LoRAName string `yaml:"lora_name"`
	// APIKeyEnv names an environment variable holding the engine's API key (sent
	// as Authorization: Bearer); empty: none.
	APIKeyEnv string `yaml:"api_key_env"`
	// Attempts bounds the tries per checkpoint (default 5), with backoff doubling
	// from 1s.
	Attempts int `yaml:"attempts"`
}

// ValidateHooks names the first bad hook (with its engine_hooks[i] path).
func ValidateHooks(hs []HookConfig) error {
	for i, h := range hs {
		switch {
		case h.Kind != HookSGLang && h.Kind != HookVLLMLoRA:
			return fmt.Errorf("engine_hooks[%d].kind %q: want %s or %s", i, h.Kind, HookSGLang, HookVLLMLoRA)
		case !strings.HasPrefix(h.URL, "http://") && !strings.HasPrefix(h.URL, "https://"):
			return fmt.Errorf("engine_hooks[%d].url %q: want http:// or https://", i, h.URL)
		case h.Kind == HookVLLMLoRA && h.LoRAName == "":
			return fmt.Errorf("engine_hooks[%d].lora_name: empty (vllm_lora needs the adapter's name)", i)
		case h.Attempts < 0:
			return fmt.Errorf("engine_hooks[%d].attempts %d: want ≥ 0", i, h.Attempts)
		}
	}
	return nil
}

// request is the HTTP request that tells the engine about checkpoint dir.
func (h HookConfig) request(ctx context.Context, dir string) (*http.Request, error) {
	path, body := "/update_weights_from_disk", map[string]any{"model_path": dir}
	if h.Kind == HookVLLMLoRA {
		path, body = "/v1/load_lora_adapter", map[string]any{"lora_name": h.LoRAName, "lora_path": dir, "load_inplace": true}
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(h.URL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if h.APIKeyEnv != "" {
		req.Header.Set("Authorization", "Bearer "+os.Getenv(h.APIKeyEnv))
	}
	return req, nil
}

// Hooks tells serving engines about each new checkpoint that Write publishes: it
// follows the checkpoint root's `latest` link and calls every hook once per checkpoint that
// verifies, retrying with backoff. The embedded gateway swaps itself and needs no
// hook.
type Hooks struct {
	Hooks    []HookConfig
	Root     string        // the checkpoint root
	Interval time.Duration // how often `latest` is looked at
	Log      zerolog.Logger
	Client   *http.Client

	mu     sync.Mutex
	states []HookState // one per hook, in config order (States)
}

// HookState is one hook's progress (status).
type HookState struct {
	Kind, URL string
	// LastCheckpoint is the last checkpoint the engine accepted, LastStep its step.
	LastCheckpoint string
	LastStep       int64
	LastPushedAt   time.Time
	// Attempts are the calls made for the newest checkpoint so far.
	Attempts int
	// LastError is the last failed call's error, cleared by a success.
	LastError   string
	LastErrorAt time.Time
	// Pushing is the checkpoint being pushed now ("" when none is).
	Pushing string
}

// States returns every hook's state, in config order.
func (h *Hooks) States() []HookState {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.initStates()
	return slices.Clone(h.states)
}

// initStates makes the states from the config once; h.mu is held.
func (h *Hooks) initStates() {
	if h.states == nil {
		h.states = make([]HookState, len(h.Hooks))
		for i, hk := range h.Hooks {
			h.states[i] = HookState{Kind: hk.Kind, URL: hk.URL}
		}
	}
}

// update changes hook i's state under the lock.
func (h *Hooks) update(i int, f func(*HookState)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.initStates()
	f(&h.states[i])
}

// Run calls the hooks for every checkpoint `latest` points to after the start
// (the one there at the start is taken as already loaded), until ctx ends.
func (h *Hooks) Run(ctx context.Context) error {
	log := h.Log.With().Str("component", "engine_hooks").Logger()
	client := h.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Minute}
	}
	seen, _ := os.Readlink(filepath.Join(h.Root, LatestLinkName))
	tick := time.NewTicker(h.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		target, err := os.Readlink(filepath.Join(h.Root, LatestLinkName))
		if err != nil || target == seen {
			continue
		}
		dir := filepath.Join(h.Root, target)
		st, err := Verify(dir)
		if err != nil {
			log.Warn().Err(err).Str("checkpoint", dir).Msg("latest checkpoint does not verify; engines not told")
			continue
		}
		seen = target
		h.push(ctx, client, dir, st.Step, "", log)
	}
}

// push calls every hook for the checkpoint at dir (of step), a vllm_lora hook's
// adapter named loraName ("": its lora_name), keeping each hook's state; it
// returns the hooks' errors joined.
func (h *Hooks) push(ctx context.Context, client *http.Client, dir string, step int64, loraName string, log zerolog.Logger) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	var errs []error
	for i, hk := range h.Hooks {
		if loraName != "" {
			hk.LoRAName = loraName
		}
		h.update(i, func(s *HookState) { s.Pushing, s.Attempts = abs, 0 })
		tried := func(err error) {
			h.update(i, func(s *HookState) {
				s.Attempts++
				if err != nil {
					s.LastError, s.LastErrorAt = err.Error(), time.Now()
					return
				}
				s.LastError, s.LastErrorAt = "", time.Time{}
				s.LastCheckpoint, s.LastStep, s.LastPushedAt = abs, step, time.Now()
			})
		}
		err := callHook(ctx, client, hk, abs, log, tried)
		h.update(i, func(s *HookState) { s.Pushing = "" })
		if err != nil && ctx.Err() == nil {
			log.Error().Err(err).Str("engine", hk.URL).Int64("step", step).Msg("engine not told about the checkpoint")
		} else if err == nil {
			log.Info().Str("engine", hk.URL).Str("kind", hk.Kind).Int64("step", step).Str("lora_name", hk.LoRAName).Msg("engine loads the checkpoint")
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// callHook tries one hook up to its attempts, doubling the wait from 1s; tried hears
// each attempt's outcome.
func callHook(ctx context.Context, client *http.Client, h HookConfig, dir string, log zerolog.Logger, tried func(error)) error {
	attempts := h.Attempts
	if attempts == 0 {
		attempts = 5
	}
	wait := time.Second
	var last error
	for i := 1; i <= attempts; i++ {
		req, err := h.request(ctx, dir)
		if err != nil {
			return fmt.Errorf("hook %s: %w", h.URL, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				tried(nil)
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		last = fmt.Errorf("call %s (attempt %d/%d): %w", req.URL, i, attempts, err)
		tried(last)
		if i == attempts {
			break
		}
		log.Warn().Err(last).Dur("retry_in", wait).Msg("engine hook failed; retrying")
		select {
		case <-ctx.Done():
			return errors.Join(last, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
	return last
}

// Push tells every hook's engine to load the checkpoint at dir (of step) now, as
// Run does for a new checkpoint, with the same attempts, backoff and states; a
// vllm_lora hook loads it as the adapter named loraName ("" keeps its
// lora_name). The gateway's A/B test on an engine loads each candidate under a
// name of its own this way (Run is not started then), so the checkpoint a session
// is pinned to keeps its name (docs/gateway.md "Which checkpoint do people
// prefer").
func (h *Hooks) Push(ctx context.Context, dir string, step int64, loraName string) error {
	client := h.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Minute}
	}
	return h.push(ctx, client, dir, step, loraName, h.Log.With().Str("component", "engine_hooks").Logger())
}
