package toolworld

import (
	"errors"
	"fmt"
	"strconv"
)

// evalExpr evaluates an integer expression of + - * / (integer division), unary
// minus and parentheses, with the usual precedence.
func evalExpr(s string) (int, error) {
	p := &exprParser{s: s}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	if p.i < len(s) {
		return 0, fmt.Errorf("syntax error at '%s'", s[p.i:])
	}
	return v, nil
}

type exprParser struct {
	s string
	i int
}

func (p *exprParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// sum := product (('+'|'-') product)*
func (p *exprParser) sum() (int, error) {
	v, err := p.product()
	for err == nil && (p.peek() == '+' || p.peek() == '-') {
		op := p.peek()
		p.i++
		var w int
		if w, err = p.product(); op == '+' {
			v += w
		} else {
			v -= w
		}
	}
	return v, err
}

// product := factor (('*'|'/') factor)*
func (p *exprParser) product() (int, error) {
	v, err := p.factor()
	for err == nil && (p.peek() == '*' || p.peek() == '/') {
		op := p.peek()
		p.i++
		var w int
		if w, err = p.factor(); err != nil {
			break
		}
		if op == '*' {
			v *= w
		} else if w == 0 {
			err = errors.New("division by zero")
		} else {
			v /= w
		}
	}
	return v, err
}

// factor := '-' factor | '(' sum ')' | number
func (p *exprParser) factor() (int, error) {
	switch c := p.peek(); {
	case c == '-':
		p.i++
		v, err := p.factor()
		return -v, err
	case c == '(':
		p.i++
		v, err := p.sum()
		if err == nil && p.peek() != ')' {
			err = errors.New("syntax error: missing ')'")
		}
		p.i++
		return v, err
	case c == 0:
		return 0, errors.New("syntax error: unexpected end")
	}
	start := p.i
	for p.i < len(p.s) && !isOp(p.s[p.i]) {
		p.i++
	}
	word := p.s[start:p.i]
	if word == "" {
		return 0, fmt.Errorf("syntax error at '%s'", p.s[start:])
	}
	v, err := strconv.Atoi(word)
	if err != nil || len(word) > 9 {
		return 0, fmt.Errorf("invalid number '%s'", word)
	}
	return v, nil
}

func isOp(c byte) bool { return c == '+' || c == '-' || c == '*' || c == '/' || c == '(' || c == ')' }
