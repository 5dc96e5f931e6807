package progcache

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
)

// param is one input of a program as its StableHLO main function declares it: the
// element type in MLIR's spelling ("f32", "bf16", "i32", "i1", …) and the dimensions.
// An entry keeps its program's params so that a restarted process can execute it
// once at start on inputs of the right shape (warm).
type param struct {
	Type string  `json:"type"`
	Dims []int64 `json:"dims,omitempty"`
}

var (
	mainRe = regexp.MustCompile(`func\.func\s+(?:public\s+)?@main\(`)
	argRe  = regexp.MustCompile(`%[\w.$-]+\s*:\s*tensor<([^<>]*)>`)
	argN   = regexp.MustCompile(`%[\w.$-]+\s*:`)
)

// programParams reads the inputs of code's main function from its MLIR text (what
// GoMLX's go-xla hands the plugin). ok is false where it cannot say: no text main
// function, an input type it does not know (complex, dynamic dimensions), or a
// sharded input (a program over several devices, whose per-device inputs the
// signature does not give); such a program is not warmed.
func programParams(code []byte) (ps []param, ok bool) {
	loc := mainRe.FindIndex(code)
	if loc == nil {
		return nil, false
	}
	rest := code[loc[1]:]
	end := bytes.Index(rest, []byte(") -> "))
	if end < 0 {
		return nil, false
	}
	sig := rest[:end]
	if bytes.Contains(sig, []byte("sharding")) {
		return nil, false
	}
	args := argRe.FindAllSubmatch(sig, -1)
	if len(args) != len(argN.FindAll(sig, -1)) {
		return nil, false // an input that is not a plain tensor
	}
	ps = make([]param, 0, len(args))
	for _, a := range args {
		parts := strings.Split(string(a[1]), "x")
		t := parts[len(parts)-1]
		if _, known := elementTypes[t]; !known {
			return nil, false
		}
		p := param{Type: t}
		for _, d := range parts[:len(parts)-1] {
			n, err := strconv.ParseInt(d, 10, 64)
			if err != nil || n < 0 {
				return nil, false
			}
			p.Dims = append(p.Dims, n)
		}
		ps = append(ps, p)
	}
	return ps, true
}

// bytes is the size of p's dense array.
func (p param) bytes() int64 {
	n := elementTypes[p.Type].bytes
	for _, d := range p.Dims {
		n *= d
	}
	return n
}

// key names p's type and shape: inputs with the same key share one buffer when a
// program is warmed.
func (p param) key() string {
	var b strings.Builder
	b.WriteString(p.Type)
	for _, d := range p.Dims {
		b.WriteString("x" + strconv.FormatInt(d, 10))
	}
	return b.String()
}
