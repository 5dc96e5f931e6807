// Package credittest reads the distillation goldens (testdata/distill/peers.json,
// written by scripts/distill_goldens.py from TRL's and the SDPO authors' own loss
// functions) that both the float64 reference (credit's TestPeerGoldens) and the
// device's graph (xla's TestDistillPeerGoldens) are held to, so the two read the
// file one way. It is test code: only tests import it.
package credittest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// PeerCase is one case of peers.json: the inputs, the peers' per-token loss and
// each peer's loss and gradient with respect to the student's logits.
type PeerCase struct {
	Name       string        `json:"name"`
	Vocab      int           `json:"vocab"`
	Mode       string        `json:"mode"`
	Divergence string        `json:"divergence"`
	Alpha      float64       `json:"alpha"` // 0: forward KL, 1: reverse KL, else JSD(α)
	K          int           `json:"k"`
	Temp       float64       `json:"temperature"`
	ISClip     *float64      `json:"is_clip"`
	Student    [][][]float64 `json:"student_logits"` // [batch, seq, vocab]
	Teacher    [][][]float64 `json:"teacher_logits"` // [batch, seq, vocab]
	Mask       [][]float64   `json:"mask"`           // [batch, seq]
	IDs        [][]int       `json:"ids"`            // [batch, seq], the sampled tokens
	Old        [][]float64   `json:"old_log_probs"`  // [batch, seq], the sampler's
	PerToken   [][]float64   `json:"per_token_loss"` // [batch, seq]
	TRL        PeerResult    `json:"trl"`
	Authors    PeerResult    `json:"authors"`
}

// PeerResult is one peer's loss and its gradient in the student's logits
// ([batch, seq, vocab]).
type PeerResult struct {
	Loss float64       `json:"loss"`
	Grad [][][]float64 `json:"grad"`
}

// PeersFile is the path of peers.json, found from this file's own location so a
// test in any folder reads it.
func PeersFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "distill", "peers.json")
}

// PeerCases reads the cases of peers.json; it fails the test on a file that is
// missing, malformed, empty, or a transcription rather than the peers' own output.
func PeerCases(t testing.TB) []PeerCase {
	t.Helper()
	b, err := os.ReadFile(PeersFile())
	require.NoError(t, err)
	var f struct {
		Meta struct {
			Transcription bool `json:"transcription"`
		} `json:"meta"`
		Cases []PeerCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(b, &f))
	require.False(t, f.Meta.Transcription, "the goldens come from the peers' own functions")
	require.NotEmpty(t, f.Cases)
	return f.Cases
}
