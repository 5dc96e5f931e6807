package tokenizer

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// mixedText returns about n bytes of deterministic text that mixes code, prose,
// CJK, emoji, numbers and whitespace runs, like agent rollouts do.
func mixedText(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the a tool call failed because grep returned nothing we should search_code " +
		"instead It's they're DON'T function return value error nil context deadline exceeded")
	chunks := []func(*strings.Builder){
		func(b *strings.Builder) { // prose
			for range 12 + rng.IntN(20) {
				b.WriteString(words[rng.IntN(len(words))])
				b.WriteByte(' ')
			}
			b.WriteString(".\n")
		},
		func(b *strings.Builder) { // code
			b.WriteString("func f" + strconv.Itoa(rng.IntN(1000)) + "(ctx context.Context, x []int32) (int, error) {\n")
			b.WriteString("\tif len(x) == 0 {\n\t\treturn 0, fmt.Errorf(\"empty: %w\", err)\n\t}\n")
			b.WriteString("\tfor i := range x {\n\t\tsum += int(x[i]) * " + strconv.Itoa(rng.IntN(99999)) + "\n\t}\n}\n\n")
		},
		func(b *strings.Builder) {
			b.WriteString("机器学习是人工智能的一个分支。日本語のテキストです。")
		},
		func(b *strings.Builder) { b.WriteString("done 😀 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ok ") },
		func(b *strings.Builder) { // numbers and JSON
			b.WriteString(`{"id": ` + strconv.Itoa(rng.Int()) + `, "score": ` + strconv.FormatFloat(rng.Float64()*1e4, 'f', 6, 64) + "}\n")
		},
		func(b *strings.Builder) { b.WriteString("    \n\t\t  \n" + strings.Repeat(" ", rng.IntN(40)) + "x\n") },
		func(b *strings.Builder) {
			b.WriteString("مرحبا بالعالم שלום עולם Привет, мир! Ça va? ")
		},
	}
	var b strings.Builder
	b.Grow(n + 1024)
	for b.Len() < n {
		chunks[rng.IntN(len(chunks))](&b)
	}
	return b.String()
}

// BenchmarkEncode measures EncodePlain throughput on 1 MB of mixed text per
// tokenizer. The BPE cache is warm after the first iteration, as in a daemon.
func BenchmarkEncode(b *testing.B) {
	benchEncode(b, func(tok Tokenizer, text string) { tok.EncodePlain(text) })
}

// BenchmarkEncodeText measures EncodeText throughput, the teacher's encoding, on the
// same text as BenchmarkEncode.
func BenchmarkEncodeText(b *testing.B) {
	benchEncode(b, func(tok Tokenizer, text string) { tok.EncodeText(text) })
}

// benchEncode runs encode on 1 MB of mixed text with each tokenizer.
func benchEncode(b *testing.B, encode func(Tokenizer, string)) {
	text := mixedText(1 << 20)
	for _, name := range append([]string{"bytes"}, hfNames...) {
		b.Run(name, func(b *testing.B) {
			tok := testTokenizer(b, name)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				encode(tok, text)
			}
		})
	}
}

// BenchmarkDecode measures Decode throughput (bytes of text per second).
func BenchmarkDecode(b *testing.B) {
	text := mixedText(1 << 20)
	for _, name := range append([]string{"bytes"}, hfNames...) {
		b.Run(name, func(b *testing.B) {
			tok := testTokenizer(b, name)
			ids := tok.EncodePlain(text)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := tok.Decode(ids); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
