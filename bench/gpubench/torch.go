package gpubench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// errNoPeer is the reason the PyTorch stages are skipped when no python was given.
var errNoPeer = fmt.Errorf("no PyTorch peer: -python is empty")

// peer runs bench/gpu/torch_peer.py CMD ARGS… and decodes its JSON object.
func (b *bench) peer(ctx context.Context, args ...string) (map[string]any, error) {
	if b.opts.Python == "" || b.opts.Peer == "" {
		return nil, errNoPeer
	}
	cmd := exec.CommandContext(ctx, b.opts.Python, append([]string{b.opts.Peer}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tail := strings.TrimSpace(stderr.String())
		if len(tail) > 800 {
			tail = "…" + tail[len(tail)-800:]
		}
		return nil, fmt.Errorf("torch_peer.py %s: %w: %s", args[0], err, tail)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("torch_peer.py %s: decode output: %w", args[0], err)
	}
	return m, nil
}
