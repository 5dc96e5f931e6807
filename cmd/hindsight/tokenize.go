package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
)

// tokenizeCmd is `hindsight tokenize -tokenizer PATH|bytes [-plain] [-decode]`: it
// reads text from stdin and prints its token ids as one JSON array, or with
// -decode reads a JSON array of ids and prints their text exactly (no newline is
// added, so `tokenize | tokenize -decode` gives back the input). Exit 1 on a load
// or decode error, 2 on a usage error.
func tokenizeCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	spec := fs.String("tokenizer", "", "`bytes`, or a tokenizer.json file or a directory holding one")
	decode := fs.Bool("decode", false, "read a JSON array of ids from stdin and print their text")
	plain := fs.Bool("plain", false, "special-token strings are ordinary text; added tokens not marked special (Qwen's <think>) still match, as Hugging Face's split_special_tokens=True")
	text := fs.Bool("text", false, "injection-safe encoding, as the teacher's for hints: no added-token string, special or not, is matched")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight tokenize -tokenizer PATH|bytes [-plain|-text|-decode] < INPUT\n\n"+
			"Encodes stdin (UTF-8 text, taken exactly, final newline included) to a JSON array of ids,\n"+
			"or with -decode prints the text of a JSON array of ids. No BOS/EOS is added.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: *spec == "", Msg: "-tokenizer PATH|bytes is required"},
		cliflag.Rule{Bad: btoi(*decode)+btoi(*plain)+btoi(*text) > 1, Msg: "give at most one of -plain, -text and -decode"},
		cliflag.NoArgs(fs)); !ok {
		return code
	}
	tok, err := tokenizer.Load(*spec)
	if err != nil {
		fmt.Fprintf(stderr, "hindsight tokenize: %v\n", err)
		return 1
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "hindsight tokenize: read stdin: %v\n", err)
		return 1
	}
	if *decode {
		var ids []int32
		if err := json.Unmarshal(in, &ids); err != nil {
			fmt.Fprintf(stderr, "hindsight tokenize: parse ids: stdin is not a JSON array of int32 ids: %v\n", err)
			return 1
		}
		text, err := tok.Decode(ids)
		if err != nil {
			fmt.Fprintf(stderr, "hindsight tokenize: %v\n", err)
			return 1
		}
		if _, err := io.WriteString(stdout, text); err != nil {
			fmt.Fprintf(stderr, "hindsight tokenize: write text: %v\n", err)
			return 1
		}
		return 0
	}
	var ids []int32
	switch {
	case *plain:
		ids = tok.EncodePlain(string(in))
	case *text:
		ids = tok.EncodeText(string(in))
	default:
		ids = tok.Encode(string(in))
	}
	w := bufio.NewWriter(stdout)
	w.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			w.WriteByte(',')
		}
		w.WriteString(strconv.FormatInt(int64(id), 10))
	}
	w.WriteString("]\n")
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "hindsight tokenize: write ids: %v\n", err)
		return 1
	}
	return 0
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
