package cliflag

import (
	"bytes"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		v          bool
		clip       float64
		positional []string
		err        string
	}{
		{args: []string{"a", "-v", "b"}, v: true, clip: 1, positional: []string{"a", "b"}},
		{args: []string{"-clip", "-1", "a"}, clip: -1, positional: []string{"a"}},
		{args: []string{"a", "--clip=2", "-v=false"}, clip: 2, positional: []string{"a"}},
		{args: []string{"a", "--", "-v", "--"}, clip: 1, positional: []string{"a", "-v", "--"}},
		{args: []string{"-", "-v"}, v: true, clip: 1, positional: []string{"-"}},
		{args: []string{"a", "-clip"}, err: "flag -clip needs a value"},
		{args: []string{"a", "-clip", "x"}, err: `invalid value "x" for flag -clip: parse error`},
		{args: []string{"a", "-nope"}, err: "flag provided but not defined: -nope"},
	} {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		var out bytes.Buffer
		fs.SetOutput(&out)
		v := fs.Bool("v", false, "")
		clip := fs.Float64("clip", 1, "")
		err := Parse(fs, tc.args)
		require.Empty(t, out.String(), "%v: Parse prints nothing", tc.args)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, "%v", tc.args)
			continue
		}
		require.NoError(t, err, "%v", tc.args)
		require.Equal(t, tc.v, *v, "%v", tc.args)
		require.Equal(t, tc.clip, *clip, "%v", tc.args)
		require.Equal(t, tc.positional, append([]string{}, fs.Args()...), "%v", tc.args)
	}
}

func TestRunHelpAndFail(t *testing.T) {
	fs := flag.NewFlagSet("hindsight x", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Usage = func() { out.WriteString("usage: hindsight x\n") }
	code, ok := Run(fs, []string{"a", "-h"}, &out)
	require.False(t, ok)
	require.Equal(t, 0, code)
	require.Equal(t, "usage: hindsight x\n", out.String())

	out.Reset()
	code, ok = Run(fs, []string{"-zz"}, &out)
	require.False(t, ok)
	require.Equal(t, 2, code)
	require.Equal(t, "hindsight x: flag provided but not defined: -zz (hindsight x -h lists the flags)\n", out.String())
}
