package daemon

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// yamlNode is one node of a config file with its key path (train.token_budget,
// eval.suites[0].tasks) and the Go type it decodes into (nil: no such key).
type yamlNode struct {
	path string
	node *yaml.Node
	typ  reflect.Type
}

// walkConfigYAML visits every node of doc with its key path and the type of t that it
// decodes into, as yaml.v3 maps them (struct fields by their yaml tag, maps by key,
// lists by index). It stops at a type that decodes itself.
func walkConfigYAML(n *yaml.Node, t reflect.Type, path string, visit func(yamlNode)) {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			walkConfigYAML(c, t, path, visit)
		}
		return
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	visit(yamlNode{path, n, t})
	if t == nil || decodesItself(t) {
		return
	}
	switch {
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := yamlField(t, k.Value)
			if !ok {
				visit(yamlNode{join(path, k.Value), k, nil})
				continue
			}
			walkConfigYAML(v, f, join(path, k.Value), visit)
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			walkConfigYAML(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), visit)
		}
	case n.Kind == yaml.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i, c := range n.Content {
			walkConfigYAML(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), visit)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(reflect.TypeFor[yaml.Unmarshaler]()) || p.Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
}

// yamlField returns the type of t's field whose yaml key is key.
func yamlField(t reflect.Type, key string) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key && f.IsExported() {
			return f.Type, true
		}
	}
	return nil, false
}

// wantForm says what a value of type t looks like in the config file.
func wantForm(t reflect.Type) string {
	if t == reflect.TypeFor[time.Duration]() {
		return "a duration such as 5s, 500ms or 10m"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	default:
		return "a mapping of keys to values"
	}
}

// gotForm says what the file has at n.
func gotForm(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

var (
	typeErrRe    = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	unknownKeyRe = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)
)

// configDecodeError rewrites yaml.v3's decode errors ("line 2: cannot unmarshal !!str
// `lots` into int") as the key path and the form the key wants
// (`train.token_budget: want an integer, got "lots" (line 2)`), using the parsed file
// doc to find the key on that line; a line it cannot place stays as yaml wrote it.
func configDecodeError(doc *yaml.Node, err error) error {
	var nodes []yamlNode
	walkConfigYAML(doc, reflect.TypeFor[Config](), "", func(n yamlNode) { nodes = append(nodes, n) })
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// A type that decodes itself (train.devices) says what it wants about the
		// value it quotes; name the key that holds the value.
		for _, n := range nodes {
			if n.typ != nil && decodesItself(n.typ) && n.node.Kind == yaml.ScalarNode && strings.Contains(err.Error(), strconv.Quote(n.node.Value)) {
				return fmt.Errorf("%s: %w (line %d)", n.path, err, n.node.Line)
			}
		}
		return fmt.Errorf("decode: %w", err)
	}
	find := func(line int, match func(yamlNode) bool) (yamlNode, bool) {
		for _, n := range nodes {
			if n.node.Line == line && match(n) {
				return n, true
			}
		}
		return yamlNode{}, false
	}
	var msgs []string
	for _, e := range te.Errors {
		msg := e
		if m := typeErrRe.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			fits := func(n yamlNode) bool {
				if n.typ == nil {
					return false
				}
				switch m[2] {
				case "map":
					return n.node.Kind == yaml.MappingNode
				case "seq":
					return n.node.Kind == yaml.SequenceNode
				}
				return n.node.Kind == yaml.ScalarNode && n.node.Value == m[3]
			}
			// Several keys can share a line ({every_steps: 0, every: 0}): the one of
			// the type yaml names, else the first that fits.
			n, ok := find(line, func(n yamlNode) bool { return fits(n) && n.typ.String() == m[4] })
			if !ok {
				n, ok = find(line, fits)
			}
			if ok {
				msg = fmt.Sprintf("%s: want %s, got %s (line %d)", n.path, wantForm(n.typ), gotForm(n.node), line)
			}
		} else if m := unknownKeyRe.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			msg = fmt.Sprintf("line %d: unknown key %q", line, m[2])
			if n, ok := find(line, func(n yamlNode) bool { return n.typ == nil && n.node.Value == m[2] }); ok {
				msg = fmt.Sprintf("%s: unknown key (line %d)", n.path, line)
			}
		}
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// checkConfigNumbers refuses a fraction where the config wants an integer, which
// yaml.v3 would cut silently (token_budget: 1.5 decodes as 1).
func checkConfigNumbers(doc *yaml.Node) error {
	var bad error
	walkConfigYAML(doc, reflect.TypeFor[Config](), "", func(n yamlNode) {
		if bad != nil || n.typ == nil || n.node.Kind != yaml.ScalarNode || n.node.Tag != "!!float" || wantForm(n.typ) != "an integer" {
			return
		}
		if f, err := strconv.ParseFloat(n.node.Value, 64); err != nil || f != math.Trunc(f) {
			bad = fmt.Errorf("%s: want an integer, got %q (line %d)", n.path, n.node.Value, n.node.Line)
		}
	})
	return bad
}
