package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChatRefusesBeyondMaxPending: with max_pending requests in the gateway, one
// more is refused with 429 at once instead of queueing for the sampler.
func TestChatRefusesBeyondMaxPending(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPending = 2
	g := &Gateway{cfg: cfg, sessions: map[string]*session{}}
	g.pending.Store(2)
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"model":"hindsight","messages":[{"role":"user","content":"hi"}]}`)))
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	var v struct{ Error apiError }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	require.Equal(t, "rate_limit_error", v.Error.Type)
	require.Equal(t, int64(2), g.pending.Load(), "a refused request leaves the count as it was")
}
