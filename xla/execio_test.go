package xla

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListLayouts: what one side of an executable packs, the other reads back in
// the same order: a kvPair through all and takeKV, written pages through
// pagePairs and takeWritten, with values before and after left in place.
func TestListLayouts(t *testing.T) {
	kv := kvPair[int]{K: []int{1, 2, 3}, V: []int{4, 5, 6}}
	l := listOf(append(append([]int{0}, kv.all()...), 7))
	require.Equal(t, 0, l.next())
	require.Equal(t, kv, takeKV(l, 3))
	require.Equal(t, 1, l.len())
	require.Equal(t, 7, l.next())

	pages := kvPair[[2]int]{K: [][2]int{{1, 2}, {3, 4}}, V: [][2]int{{5, 6}, {7, 8}}}
	flat := pagePairs(pages)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, flat)
	require.Equal(t, pages, takeWritten(listOf(flat), 2))

	// take's result is capped: appending to it cannot overwrite what follows.
	l = listOf([]int{1, 2, 3})
	head := l.take(1)
	_ = append(head, 9)
	require.Equal(t, []int{2, 3}, l.take(2))
}
