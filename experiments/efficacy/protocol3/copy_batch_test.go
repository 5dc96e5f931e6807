package protocol3

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
)

// TestCopyBatchesShares checks the batch mix attempts 5 and 6 register: with PerBatch
// copy rollouts of a 32-rollout batch, each batch holds exactly 32−PerBatch world
// demonstrations and PerBatch rollouts of copy groups taken whole (the last one cut),
// so attempt 6's PerBatch 32 trains on no world demonstration at all, and attempt 5's
// 16 on 16 of each; every copy group is drawn once before any is drawn again.
func TestCopyBatchesShares(t *testing.T) {
	var world []credit.Sequence
	for i := range 50 {
		world = append(world, credit.Sequence{ID: fmt.Sprintf("demo3-%05d", i)})
	}
	var groups [][]credit.Sequence
	for i := range 40 {
		var g []credit.Sequence
		for j := range 2 + i%3 { // 2–4 variants, as CopyDemos makes
			g = append(g, credit.Sequence{ID: fmt.Sprintf("copy3-%05d-%d", i, j)})
		}
		groups = append(groups, g)
	}
	for _, per := range []int{16, 32} {
		b := newCopyBatches(world, groups, rand.New(rand.NewPCG(3, 0x73667403)))
		firstSeen := map[string]int{} // group → the batch it was first drawn in
		for n := range 12 {
			batch := b.batch(32, per)
			require.Len(t, batch, 32)
			demos, copies := 0, 0
			for i, s := range batch {
				if strings.HasPrefix(s.ID, "demo3-") {
					require.Less(t, i, 32-per, "world demonstrations come first")
					demos++
					continue
				}
				copies++
				g := s.ID[:len("copy3-00000")]
				if _, ok := firstSeen[g]; !ok {
					firstSeen[g] = n
				}
			}
			require.Equal(t, 32-per, demos, "per %d batch %d", per, n)
			require.Equal(t, per, copies, "per %d batch %d", per, n)
		}
		require.Len(t, firstSeen, len(groups), "per %d: every group drawn in 12 batches", per)
	}
}
