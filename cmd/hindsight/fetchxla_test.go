package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/pjrt"
)

func TestFetchXLACPUCmdErrors(t *testing.T) {
	dir := t.TempDir()
	notPinned := filepath.Join(dir, "other.whl")
	require.NoError(t, os.WriteFile(notPinned, []byte("PK not the wheel"), 0o644))

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "missing wheel", args: []string{"-cache", dir, "-wheel", filepath.Join(dir, "nope.whl")}, code: 1, want: "nope.whl"},
		{name: "not the pinned wheel", args: []string{"-cache", dir, "-wheel", notPinned}, code: 1, want: "not the pinned file"},
		{name: "pip fails", args: []string{"-cache", dir, "-pip", "false"}, code: 1, want: pjrt.CPU.Package + "==" + pjrt.CPU.Version},
		{name: "stray argument", args: []string{"x"}, code: 2, want: `hindsight fetch-xla-cpu: unexpected argument "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := fetchXLACPUCmd(t.Context(), tc.args, &out, &errb)
			require.Equal(t, tc.code, code, errb.String())
			require.Contains(t, errb.String(), tc.want)
			require.Empty(t, out.String())
			_, err := os.Stat(pjrt.CPU.Path(dir))
			require.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}
