package rollout

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// benchFile returns a file of n rollouts of tokens tokens each in the given format,
// written once per machine into the OS temp folder and reused.
func benchFile(b *testing.B, n, tokens int, format Format) string {
	b.Helper()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("hindsight-bench-v1-%dx%d-%s.arrow", n, tokens, format))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	rs := make([]*Rollout, n)
	for i := range rs {
		rs[i] = fxRollout(fmt.Sprintf("bench-%d", i), tokens)
	}
	if err := WriteFile(path, rs, WriteOptions{Format: format}); err != nil {
		b.Fatal(err)
	}
	return path
}

// reportThroughput reports MB/s (through SetBytes) and tokens/s.
func reportThroughput(b *testing.B, path string, tokensPerFile int, elapsed time.Duration) {
	if elapsed > 0 {
		b.ReportMetric(float64(tokensPerFile)*float64(b.N)/elapsed.Seconds(), "tokens/s")
	}
}

func fileSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// BenchmarkRead100k reads 32 rollouts of 100k tokens with the Reader, validation
// included. Compare with BenchmarkRawCopy100k, which only reads the bytes.
func BenchmarkRead100k(b *testing.B) {
	const n, tokens = 32, 100_000
	for _, format := range formats {
		b.Run(format.String(), func(b *testing.B) {
			path := benchFile(b, n, tokens, format)
			b.SetBytes(fileSize(b, path))
			b.ReportAllocs()
			benchRead(b, path, n*tokens)
		})
	}
}

// BenchmarkRawCopy100k copies the bytes of BenchmarkRead100k's file to io.Discard: the
// ceiling the Reader is measured against.
func BenchmarkRawCopy100k(b *testing.B) {
	const n, tokens = 32, 100_000
	for _, format := range formats {
		b.Run(format.String(), func(b *testing.B) {
			path := benchFile(b, n, tokens, format)
			b.SetBytes(fileSize(b, path))
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, f); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			reportThroughput(b, path, n*tokens, time.Since(start))
		})
	}
}

// BenchmarkValidate100k measures Validate alone on one rollout of 100k tokens.
func BenchmarkValidate100k(b *testing.B) {
	r := fxRollout("v", 100_000)
	b.SetBytes(int64(len(r.Tokens)) * 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if ps := Validate(r, ReadOptions{VocabSize: 1000}); ps != nil {
			b.Fatal(ps)
		}
	}
}

// BenchmarkReadHeap2GB writes a ~2 GB rollout file batch by batch, reads it through,
// and reports the peak Go heap while reading ("peak-heap-MB"; it must stay well under
// 300 MB whatever the file size). It runs only with HINDSIGHT_BENCH_2GB=1.
func BenchmarkReadHeap2GB(b *testing.B) {
	if os.Getenv("HINDSIGHT_BENCH_2GB") != "1" {
		b.Skip("set HINDSIGHT_BENCH_2GB=1 to write and read a 2 GB file")
	}
	const tokens = 100_000
	const rows = 2 << 30 / (tokens * 8) // tokens + log-probs: 8 bytes a token
	path := filepath.Join(b.TempDir(), "2gb.arrow")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWriter(f, WriteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	r := fxRollout("", tokens)
	for i := 0; i < rows; i++ {
		r.ID = fmt.Sprintf("big-%d", i)
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fileSize(b, path))

	var peak uint64
	var ms runtime.MemStats
	sample := func() {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		runtime.GC()
		rd, err := OpenReader(path, ReadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rd.Next() {
			if rd.Problems() != nil {
				b.Fatal(rd.Problems())
			}
			if n%8 == 0 {
				sample()
			}
			n++
		}
		sample()
		if err := rd.Err(); err != nil {
			b.Fatal(err)
		}
		rd.Close()
		if n != rows {
			b.Fatalf("read %d rows, want %d", n, rows)
		}
	}
	reportThroughput(b, path, rows*tokens, time.Since(start))
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
	if peak > 300<<20 {
		b.Errorf("peak heap %d MB, want < 300 MB", peak>>20)
	}
}

// benchRead reads the file at path b.N times, failing on any problem or a token count
// other than want, and reports the throughput.
func benchRead(b *testing.B, path string, want int) {
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		rd, err := OpenReader(path, ReadOptions{VocabSize: 1000})
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for rd.Next() {
			if rd.Problems() != nil {
				b.Fatal(rd.Problems())
			}
			got += len(rd.Rollout().Tokens)
		}
		if err := rd.Err(); err != nil {
			b.Fatal(err)
		}
		rd.Close()
		if got != want {
			b.Fatalf("read %d tokens, want %d", got, want)
		}
	}
	reportThroughput(b, path, want, time.Since(start))
}
