package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// answerOf posts one unrecorded request and returns its content and token ids.
func answerOf(t *testing.T, url string, seed int, stream bool) string {
	req := map[string]any{"model": "policy", "messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("question %d", seed%3)}},
		"max_tokens": 8 + seed%9, "seed": seed, "logprobs": true, "temperature": 0.5 + float64(seed%3)/2}
	if stream {
		req["stream"] = true
		got := readStream(t, post(t, url, req))
		return fmt.Sprintf("%q %v %s", got.content, got.ids, got.finish)
	}
	var v struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Logprobs struct {
				Content []struct {
					TokenID int32   `json:"token_id"`
					Logprob float64 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(post(t, url, req), &v))
	var ids []int32
	for _, e := range v.Choices[0].Logprobs.Content {
		ids = append(ids, e.TokenID)
	}
	return fmt.Sprintf("%q %v %s", v.Choices[0].Message.Content, ids, v.Choices[0].FinishReason)
}

// TestBatchedEqualsAlone: 16 concurrent requests (half streamed) with their own
// seeds, temperatures and lengths are sampled in a shared batch, and each answer
// equals the one a gateway with max_batch 1 gives the same request.
func TestBatchedEqualsAlone(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBatch = 1
	_, alone, _ := newTestGatewayWith(t, cfg)
	g, srv, _ := newTestGateway(t)
	const n = 16
	want := make([]string, n)
	for i := range n {
		want[i] = answerOf(t, alone.URL, i, i%2 == 1)
	}
	got := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			got[i] = answerOf(t, srv.URL, i, i%2 == 1)
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, want, got)
	b := g.pol.cur.Load().batch
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Positive(t, b.shared, "some steps ran several requests (%d steps)", b.steps)
}

// BenchmarkConcurrentRequests measures, in one run, 8 clients' requests per second
// with max_batch 8 against max_batch 1 (one request at a time, as before):
//
//	go test ./gateway -run '^$' -bench ConcurrentRequests -benchtime 64x
func BenchmarkConcurrentRequests(b *testing.B) {
	for _, size := range []int{1, 8} {
		b.Run(fmt.Sprintf("max_batch=%d", size), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.MaxBatch = size
			_, srv, _ := newTestGatewayWith(b, cfg)
			body := []byte(`{"model":"policy","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":32,"seed":1}`)
			var next sync.Mutex
			left := b.N
			start, cpu0 := time.Now(), cpuSeconds()
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for {
						next.Lock()
						if left == 0 {
							next.Unlock()
							return
						}
						left--
						next.Unlock()
						resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
						if err != nil {
							b.Error(err)
							return
						}
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "requests/s")
			// On a shared machine the process's CPU seconds are steadier than the wall.
			b.ReportMetric((cpuSeconds()-cpu0)*1e3/float64(b.N), "cpu-ms/request")
		})
	}
}

// cpuSeconds is the CPU time the process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
