package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/viewer"
)

// inspectCmd is `hindsight inspect CREDITFILE… [-model DIR] [-clip C] (-html OUT | -serve ADDR)`:
// it builds the credit viewer page (package viewer) for the credit files and
// writes it to OUT (durably) or serves it at http://ADDR/ until interrupted.
// Exit 1 on a read, decode, write or listen error, 2 on a usage error.
func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", "model `DIR` (or tokenizer.json) whose tokenizer decodes the tokens; default: the byte tokenizer for bytes-v1 rollouts, else token ids")
	clip := fs.Float64("clip", credit.DefaultConfig().Clip, "credit.clip of the run: |Δ| at or above it counts as clipped")
	htmlOut := fs.String("html", "", "write the page to `FILE`")
	serve := fs.String("serve", "", "serve the page at http://`ADDR`/ until interrupted")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight inspect CREDITFILE... [-model DIR] [-clip C] (-html OUT | -serve ADDR)\n\n"+
			"Builds one self-contained HTML page (no network) showing the credit files' rollouts.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: fs.NArg() == 0, Msg: "no credit file given"},
		cliflag.Rule{Bad: (*htmlOut == "") == (*serve == ""), Msg: "give one of -html OUT and -serve ADDR"},
		cliflag.Rule{Bad: !(*clip > 0), Msg: fmt.Sprintf("-clip %g: want > 0", *clip)}); !ok {
		return code
	}
	page, err := inspectPage(fs.Args(), *model, *clip, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hindsight inspect: %v\n", err)
		return 1
	}
	if *htmlOut != "" {
		if err := fsutil.WriteFile(*htmlOut, 0o644, func(w io.Writer) error { return viewer.Write(w, page) }); err != nil {
			fmt.Fprintf(stderr, "hindsight inspect: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s: %d rollouts\n", *htmlOut, len(page.Rollouts))
		return 0
	}
	if err := inspectServe(ctx, *serve, page, stdout); err != nil {
		fmt.Fprintf(stderr, "hindsight inspect: %v\n", err)
		return 1
	}
	return 0
}

// inspectPage reads the credit files and builds the page; it warns on stderr of
// rows whose tokenizer fingerprint is not -model's (their text may be wrong).
func inspectPage(files []string, model string, clip float64, stderr io.Writer) (*viewer.Page, error) {
	var tok tokenizer.Tokenizer
	if model != "" {
		t, err := tokenizer.Load(model)
		if err != nil {
			return nil, fmt.Errorf("load -model tokenizer: %w", err)
		}
		tok = t
	}
	rows := make([][]creditfile.Row, len(files))
	for i, f := range files {
		r, err := creditfile.Read(f)
		if err != nil {
			return nil, err
		}
		rows[i] = r
		if tok == nil {
			continue
		}
		for j := range r {
			if fp := r[j].Tokenizer; fp != "" && fp != tok.Fingerprint() {
				fmt.Fprintf(stderr, "hindsight inspect: warning: %s row %d (rollout_id %q): tokenizer %s, -model's is %s: its text may be wrong\n",
					f, j, r[j].RolloutID, fp, tok.Fingerprint())
			}
		}
	}
	return viewer.Build(files, rows, tok, clip)
}

// inspectServe serves page at addr until ctx is done.
func inspectServe(ctx context.Context, addr string, page *viewer.Page, stdout io.Writer) error {
	h, err := viewer.Handler(page)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "serving %d rollouts at http://%s/\n", len(page.Rollouts), ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", addr, err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", addr, err)
	}
	return nil
}
