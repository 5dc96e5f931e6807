package toolworld

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func testMachine() *machine {
	return newMachine(Task{
		Files: map[string]string{"notes/owl.txt": "41", "notes/fox.txt": "bee=elk\nBee=yak", "logs/cod.txt": "17"},
		KV:    map[string]string{"elk": "23"},
	})
}

func TestTools(t *testing.T) {
	for _, tc := range []struct {
		line   string
		out    string
		failed bool
	}{
		{"ls", "logs/ notes/", false},
		{"ls notes", "fox.txt owl.txt", false},
		{"ls ./notes/", "fox.txt owl.txt", false},
		{"ls notes/owl.txt", "notes/owl.txt", false},
		{"ls docs", "ls: cannot access 'docs': No such file or directory", true},
		{"ls -l notes", "ls: invalid option -l", true},
		{"ls notes logs", "ls: want at most 1 argument, got 2", true},
		{"cat notes/owl.txt", "41", false},
		{"cat /logs/cod.txt", "17", false},
		{"cat notes/ant.txt", "cat: notes/ant.txt: No such file or directory", true},
		{"cat notes", "cat: notes: Is a directory", true},
		{"cat", "cat: want 1 file, got 0", true},
		{"cat -n notes/owl.txt", "cat: invalid option -n", true},
		{"grep bee notes", "notes/fox.txt:bee=elk", false},
		{"grep -i bee notes", "notes/fox.txt:bee=elk\nnotes/fox.txt:Bee=yak", false},
		{"grep -c bee notes", "1", false},
		{"grep -ic bee notes/fox.txt", "2", false},
		{"grep bee notes/fox.txt", "bee=elk", false},
		{"grep ram notes", "grep: no matches", true},
		{"grep bee docs", "grep: docs: No such file or directory", true},
		{"grep -z bee notes", "grep: invalid option -z", true},
		{"grep bee", "grep: want PATTERN and PATH, got 1 arguments", true},
		{"calc 41+17", "58", false},
		{"calc 2 + 3 * 4", "14", false},
		{"calc (2+3)*4", "20", false},
		{"calc -5+3", "-2", false},
		{"calc 7/2", "3", false},
		{"calc 7/0", "calc: division by zero", true},
		{"calc owl+3", "calc: invalid number 'owl'", true},
		{"calc 3+", "calc: syntax error: unexpected end", true},
		{"calc (3+4", "calc: syntax error: missing ')'", true},
		{"calc", "calc: missing expression", true},
		{"get elk", "23", false},
		{"get owl", "get: owl: key not found", true},
		{"get", "get: want 1 key, got 0", true},
		{"set owl 12", "ok", false},
		{"set owl twelve", "set: invalid value 'twelve': want an integer", true},
		{"set owl", "set: want a key and a value, got 1 arguments", true},
		{"cta notes/owl.txt", "cta: unknown tool", true},
		{"rm -rf notes", "rm: unknown tool", true},
		{"", "error: empty command", true},
	} {
		out, failed := testMachine().run(ParseCall(tc.line))
		require.Equal(t, tc.out, out, tc.line)
		require.Equal(t, tc.failed, failed, tc.line)
	}
}

func TestSetThenGet(t *testing.T) {
	m := testMachine()
	_, failed := m.run(ParseCall("set owl 12"))
	require.False(t, failed)
	out, failed := m.run(ParseCall("get owl"))
	require.False(t, failed)
	require.Equal(t, "12", out)
}

func TestParseCall(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Call
	}{
		{"ls notes", Call{"ls", []string{"notes"}}},
		{"  cat   a/b.txt \n", Call{"cat", []string{"a/b.txt"}}},
		{"\n\ncalc 1+2\nanswer 3", Call{"calc", []string{"1+2"}}},
		{"answer 42", Call{"answer", []string{"42"}}},
		{"", Call{}},
		{" \n\t", Call{}},
	} {
		require.Equal(t, tc.want, ParseCall(tc.text), "%q", tc.text)
	}
}
