package protocol3

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCountGroups: groups of G are mixed, all right or all wrong, in all and per family
// of the group's task; a trailing partial group is not counted.
func TestCountGroups(t *testing.T) {
	rewards := []int{
		1, 0, 1, 1, // read: mixed
		0, 0, 0, 0, // chain: all wrong
		1, 1, 1, 1, // read: all right
		0, 0, 1, 0, // chain: mixed
		1, 1, // partial
	}
	fam := func(f string) []string { return []string{f, f, f, f} }
	families := append(append(append(append(fam("read"), fam("chain")...), fam("read")...), fam("chain")...), "sum", "sum")
	all, by := CountGroups(rewards, families, 4)
	require.Equal(t, GroupCounts{Groups: 4, Mixed: 2, AllRight: 1, AllWrong: 1}, all)
	require.Equal(t, map[string]GroupCounts{
		"read":  {Groups: 2, Mixed: 1, AllRight: 1},
		"chain": {Groups: 2, Mixed: 1, AllWrong: 1},
	}, by)
}

func TestGroupsLine(t *testing.T) {
	require.Equal(t, "chain 1/0/1, read 1/1/0", groupsLine(map[string]GroupCounts{
		"read": {Groups: 2, Mixed: 1, AllRight: 1}, "chain": {Groups: 2, Mixed: 1, AllWrong: 1}}))
}
