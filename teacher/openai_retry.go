package teacher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// complete sends prompt with retries, backoff and the breaker, and returns the hint
// text or a *Failure. It returns ctx's error when ctx ends.
func (t *OpenAITeacher) complete(ctx context.Context, prompt string) (string, error) {
	var last *Failure
	for attempt := 0; ; attempt++ {
		text, f, retryAfter := t.attempt(ctx, prompt, attempt)
		if f == nil {
			return text, nil
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		last = f
		if !retryable(f.Kind) || attempt >= t.cfg.Retries {
			return "", last
		}
		if retryAfter > t.cfg.MaxRetryAfter {
			t.log.Debug().Dur("retry_after", retryAfter).Msg("server asks to wait longer than max_retry_after; giving up")
			return "", last
		}
		wait := max(t.backoff(attempt), retryAfter)
		if err := t.sleep(ctx, wait); err != nil {
			return "", err
		}
		t.stats.retries.Add(1)
	}
}

// retryable reports whether a failure may go away by asking again.
func retryable(k FailureKind) bool {
	switch k {
	case FailTimeout, FailRateLimited, FailServer, FailReset, FailMalformed, FailOther:
		return true
	}
	return false
}

// backoff returns the wait before retry n (0-based): uniform in [d/2, d],
// d = min(Backoff·2^n, MaxBackoff).
func (t *OpenAITeacher) backoff(n int) time.Duration {
	d := t.cfg.MaxBackoff
	if n < 32 {
		d = min(t.cfg.Backoff<<n, t.cfg.MaxBackoff)
	}
	if d <= 0 {
		d = t.cfg.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// attempt sends one request. It returns the hint, or a failure (counted) and the
// server's Retry-After (0 when absent).
func (t *OpenAITeacher) attempt(ctx context.Context, prompt string, n int) (string, *Failure, time.Duration) {
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return "", &Failure{Kind: FailOther, Err: ctx.Err()}, 0
	}
	defer func() { <-t.sem }()
	if !t.breaker.allow() {
		t.stats.fault(FailBreakerOpen)
		return "", &Failure{Kind: FailBreakerOpen, Err: errors.New("circuit breaker open")}, 0
	}
	t.stats.requests.Add(1)
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	var resp *http.Response
	cc, err := t.client.Chat.Completions.New(actx, openai.ChatCompletionNewParams{
		Model: t.cfg.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(t.system),
			openai.UserMessage(prompt),
		},
		MaxTokens:   openai.Int(int64(t.cfg.MaxHintTokens)),
		Temperature: openai.Float(t.cfg.Temperature),
	}, option.WithResponseInto(&resp))
	if ctx.Err() != nil { // the caller gave up: not the server's fault
		t.breaker.cancel()
		return "", &Failure{Kind: FailOther, Err: ctx.Err()}, 0
	}
	var f *Failure
	var retryAfter time.Duration
	if err != nil {
		f, retryAfter = classify(err, resp)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
	}
	var text string
	if f == nil {
		text, f = t.check(cc)
	}
	// The breaker tracks whether the server is healthy: an answer that is empty or too
	// long is the model's fault, not the server's.
	t.breaker.record(f == nil || f.Kind == FailEmpty || f.Kind == FailTooLong || f.Kind == FailClient)
	if f != nil {
		t.stats.fault(f.Kind)
		t.log.Debug().Str("kind", f.Kind.String()).Int("attempt", n).Dur("took", time.Since(start)).
			Err(f.Err).Msg("teacher request failed")
		return "", f, retryAfter
	}
	return text, nil, 0
}

// check turns a decoded completion into a hint or a failure.
func (t *OpenAITeacher) check(cc *openai.ChatCompletion) (string, *Failure) {
	if cc == nil || len(cc.Choices) == 0 {
		return "", &Failure{Kind: FailMalformed, Err: errors.New("completion has no choices")}
	}
	ch := cc.Choices[0]
	text := strings.TrimSpace(ch.Message.Content)
	if text == "" {
		return "", &Failure{Kind: FailEmpty, Err: fmt.Errorf("completion is empty (finish_reason %q)", ch.FinishReason)}
	}
	if ch.FinishReason == "length" {
		return "", &Failure{Kind: FailTooLong, Err: fmt.Errorf("completion cut at max_tokens %d", t.cfg.MaxHintTokens)}
	}
	if n := len(t.tok.EncodeText(text)); n > t.cfg.MaxHintTokens {
		return "", &Failure{Kind: FailTooLong, Err: fmt.Errorf("hint is %d tokens, cap %d", n, t.cfg.MaxHintTokens)}
	}
	return text, nil
}

// classify maps a request error to a failure kind. resp is the HTTP response when one
// arrived (kept by option.WithResponseInto even when the SDK then fails).
func classify(err error, resp *http.Response) (*Failure, time.Duration) {
	if resp != nil && resp.StatusCode >= 400 {
		ra := retryAfter(resp.Header)
		err = fmt.Errorf("HTTP %d", resp.StatusCode) // the SDK's message may echo request details
		switch code := resp.StatusCode; {
		case code == http.StatusTooManyRequests:
			return &Failure{Kind: FailRateLimited, Err: err}, ra
		case code == http.StatusRequestTimeout:
			return &Failure{Kind: FailTimeout, Err: err}, ra
		case code >= 500:
			return &Failure{Kind: FailServer, Err: err}, ra
		default:
			return &Failure{Kind: FailClient, Err: err}, 0
		}
	}
	var ne net.Error
	reset := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "server closed")
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return &Failure{Kind: FailTimeout, Err: err}, 0
	case resp != nil && (reset || strings.Contains(err.Error(), "reading response body")):
		return &Failure{Kind: FailReset, Err: err}, 0
	case resp != nil: // a 2xx whose body is not a chat completion
		return &Failure{Kind: FailMalformed, Err: err}, 0
	case reset, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &Failure{Kind: FailReset, Err: err}, 0
	}
	var oe *openai.Error
	if errors.As(err, &oe) {
		return &Failure{Kind: FailServer, Err: fmt.Errorf("HTTP %d", oe.StatusCode)}, 0
	}
	return &Failure{Kind: FailOther, Err: err}, 0
}

// retryAfter reads retry-after-ms or Retry-After (seconds or an HTTP date); 0 when
// absent or unparsable.
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(at))
	}
	return 0
}
