package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// kind is the shape of a YAML node.
type kind int

const (
	kindNull kind = iota
	kindScalar
	kindMap
	kindSeq
)

// Pos is a 1-based line and column in the uploaded text.
type Pos struct{ Line, Column int }

// node is a YAML node with positions.
type node struct {
	kind kind
	pos  Pos
	// scalar: the value as written and what YAML typed it as (str, int, float, bool).
	text, typ string
	fields    []field // mapping, in document order
	items     []*node // sequence
}

type field struct {
	key    string
	keyPos Pos
	value  *node
}

// get returns the value of a mapping key (nil when absent).
func (n *node) get(key string) (*node, Pos, bool) {
	if n == nil || n.kind != kindMap {
		return nil, Pos{}, false
	}
	for _, f := range n.fields {
		if f.key == key {
			return f.value, f.keyPos, true
		}
	}
	return nil, Pos{}, false
}

func (n *node) describe() string {
	switch n.kind {
	case kindNull:
		return "null"
	case kindMap:
		return "a mapping"
	case kindSeq:
		return "a list"
	}
	switch n.typ {
	case "int":
		return "an integer"
	case "float":
		return "a number"
	case "bool":
		return "a boolean"
	}
	return "a string"
}

// parseTree parses YAML text into a tree: anchors and aliases expand to their values (the
// positions inside an aliased value are the anchor's), a merge key (<<) merges the mappings
// it names under the keys the mapping does not set itself. A parse failure returns the
// position of the error when the parser gives one; a duplicate key is one.
func parseTree(src []byte) (root *node, at Pos, err error) {
	defer func() { // the parser must not take the orchestrator down on hostile input
		if r := recover(); r != nil {
			root, at, err = nil, Pos{1, 1}, fmt.Errorf("malformed YAML: %v", r)
		}
	}()
	if at, lerr := yamlLimits(src); lerr != nil {
		return nil, at, lerr
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &node{kind: kindNull, pos: Pos{1, 1}}, Pos{}, nil
		}
		return nil, syntaxPos(err, src), syntaxErr(err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, Pos{next.Line, next.Column}, errors.New("the file holds more than one YAML document; one workflow per file")
	case !errors.Is(err, io.EOF):
		return nil, syntaxPos(err, src), syntaxErr(err)
	}
	body := &doc
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return &node{kind: kindNull, pos: Pos{1, 1}}, Pos{}, nil
		}
		body = doc.Content[0]
	}
	cv := &converter{budget: MaxYAMLExpansion}
	out := cv.convert(body, 0)
	if cv.err != nil {
		return nil, cv.errAt, cv.err
	}
	return out, Pos{}, nil
}

// syntaxLine reads the line of a parser error ("yaml: line 3: ...").
var syntaxLine = regexp.MustCompile(`line (\d+)`)

// syntaxErr is a parser error without the prefixes its diagnostic says otherwise.
func syntaxErr(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := syntaxLine.FindStringIndex(msg); m != nil && m[0] == 0 {
		msg = strings.TrimPrefix(msg[m[1]:], ": ")
	}
	return errors.New(msg)
}

func syntaxPos(err error, src []byte) Pos {
	if m := syntaxLine.FindStringSubmatch(err.Error()); m != nil {
		if n, perr := strconv.Atoi(m[1]); perr == nil {
			if opener := unclosedFlow(err.Error()); opener != 0 {
				n = flowStart(src, n, opener)
			}
			return Pos{n, 1}
		}
	}
	return Pos{1, 1}
}

// unclosedFlow returns the opener of the flow collection a parser error says was left open
// ('{' or '['), or 0.
func unclosedFlow(msg string) byte {
	switch {
	case strings.HasSuffix(msg, "did not find expected ',' or '}'"):
		return '{'
	case strings.HasSuffix(msg, "did not find expected ',' or ']'"):
		return '['
	}
	return 0
}

// flowStart is the line an unclosed flow collection starts on, from the line the parser
// gave (n). The parser names the collection by its start counted from 0 — the line after n —
// unless it starts on the first line, when it names where it noticed, counted from 0 too:
// the line after n is taken when it holds the opener, else the closest line before it that
// does.
func flowStart(src []byte, n int, opener byte) int {
	lines := bytes.Split(src, []byte("\n"))
	for l := min(n+1, len(lines)); l >= 1; l-- {
		if bytes.IndexByte(lines[l-1], opener) >= 0 {
			return l
		}
	}
	return n
}

// converter turns parser nodes into a tree, counting the nodes it makes against budget: an
// alias expands its anchor's subtree again, so a few aliases can stand for billions of nodes.
type converter struct {
	budget  int // nodes left to make inside aliases
	aliased int // how many aliases deep the conversion is
	err     error
	errAt   Pos
}

func (cv *converter) fail(at Pos, err error) {
	if cv.err == nil {
		cv.err, cv.errAt = err, at
	}
}

func (cv *converter) convert(n *yaml.Node, depth int) *node {
	if n == nil {
		return &node{kind: kindNull, pos: Pos{1, 1}}
	}
	pos := Pos{n.Line, n.Column}
	if cv.aliased > 0 {
		if cv.budget--; cv.budget < 0 {
			cv.fail(pos, &errYAMLLimit{fmt.Sprintf("its aliases expand to more than %d nodes: each alias repeats what its anchor names", MaxYAMLExpansion)})
		}
	}
	if cv.err != nil || depth > 100 {
		return &node{kind: kindNull, pos: pos}
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return &node{kind: kindNull, pos: pos}
		}
		cv.aliased++
		defer func() { cv.aliased-- }()
		return cv.convert(n.Alias, depth+1)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return &node{kind: kindNull, pos: pos}
		}
		return cv.convert(n.Content[0], depth)
	case yaml.MappingNode:
		return cv.mapping(n, depth)
	case yaml.SequenceNode:
		out := &node{kind: kindSeq, pos: pos, items: make([]*node, 0, len(n.Content))}
		for _, it := range n.Content {
			out.items = append(out.items, cv.convert(it, depth+1))
		}
		return out
	}
	switch n.ShortTag() {
	case "!!null":
		return &node{kind: kindNull, pos: pos}
	case "!!int":
		return &node{kind: kindScalar, typ: "int", text: n.Value, pos: pos}
	case "!!float":
		return &node{kind: kindScalar, typ: "float", text: n.Value, pos: pos}
	case "!!bool":
		return &node{kind: kindScalar, typ: "bool", text: strings.ToLower(n.Value), pos: pos}
	}
	return &node{kind: kindScalar, typ: "str", text: n.Value, pos: pos}
}

// mapping converts a mapping: its own keys in document order, each key of a merge (<<) at
// the merge's place unless the mapping or an earlier merge sets it. A key set twice is an
// error, as YAML says.
func (cv *converter) mapping(n *yaml.Node, depth int) *node {
	out := &node{kind: kindMap, pos: Pos{n.Line, n.Column}, fields: make([]field, 0, len(n.Content)/2)}
	own := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if isMerge(k) {
			continue
		}
		if own[k.Value] {
			cv.fail(Pos{k.Line, k.Column}, fmt.Errorf("line %d: mapping key %q already defined", k.Line, k.Value))
			return out
		}
		own[k.Value] = true
	}
	merged := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isMerge(k) {
			f := field{key: k.Value, keyPos: Pos{k.Line, k.Column}, value: cv.convert(v, depth+1)}
			if f.value.kind == kindNull && v.Kind == yaml.ScalarNode && v.Value == "" {
				f.value.pos = f.keyPos // "key:" with nothing after it
			}
			out.fields = append(out.fields, f)
			continue
		}
		// <<: *a, or <<: [*a, *b] (the earlier one wins).
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, src := range sources {
			m := cv.convert(src, depth+1)
			if cv.err != nil {
				return out
			}
			if m.kind != kindMap {
				cv.fail(Pos{src.Line, src.Column}, fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings, got %s", src.Line, m.describe()))
				return out
			}
			for _, f := range m.fields {
				if !own[f.key] && !merged[f.key] {
					merged[f.key] = true
					out.fields = append(out.fields, f)
				}
			}
		}
	}
	if len(out.fields) > 0 {
		out.pos = out.fields[0].keyPos
	}
	return out
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge"
}

// Limits on a workflow's YAML, checked by a scan of the text before it is parsed: a parser
// building a tree for 100,000 nested brackets (200 KB) used 10 GB.
const (
	// MaxYAMLDepth bounds flow nesting ([ and {) and block nesting (by indentation).
	MaxYAMLDepth = 64
	// MaxYAMLIndent bounds a line's indentation, in columns.
	MaxYAMLIndent = 256
	// MaxYAMLAliases bounds alias references (*name), each of which expands a subtree.
	MaxYAMLAliases = 100
	// MaxYAMLExpansion bounds the nodes that aliases expand to, in all (a billion-laughs
	// document of fewer than 100 aliases stands for billions).
	MaxYAMLExpansion = 100_000
)

// errYAMLLimit is a text beyond the limits above.
type errYAMLLimit struct{ msg string }

func (e *errYAMLLimit) Error() string { return e.msg }

// yamlLimits scans src — outside quoted strings and comments — for flow nesting deeper than
// MaxYAMLDepth, a line indented more than MaxYAMLIndent columns and more than MaxYAMLAliases
// aliases, and returns the first excess with its position. It costs one pass, no allocation.
func yamlLimits(src []byte) (Pos, error) {
	line, col, depth, aliases := 1, 0, 0, 0
	indent, atLineStart := 0, true
	for i := 0; i < len(src); i++ {
		c := src[i]
		col++
		if c == '\n' {
			line, col, indent, atLineStart = line+1, 0, 0, true
			continue
		}
		if atLineStart {
			if c == ' ' {
				if indent++; indent > MaxYAMLIndent {
					return Pos{line, col}, &errYAMLLimit{fmt.Sprintf("a line indented more than %d columns: nesting beyond what a workflow needs", MaxYAMLIndent)}
				}
				continue
			}
			atLineStart = false
		}
		switch c {
		case '#':
			if i == 0 || src[i-1] == ' ' || src[i-1] == '\t' || src[i-1] == '\n' {
				for i+1 < len(src) && src[i+1] != '\n' { // a comment, to the end of the line
					i++
				}
			}
		case '"', '\'':
			for i++; i < len(src) && src[i] != c; i++ { // a quoted string
				if c == '"' && src[i] == '\\' {
					i++
				} else if src[i] == '\n' {
					line, col = line+1, 0
				}
			}
		case '[', '{':
			if depth++; depth > MaxYAMLDepth {
				return Pos{line, col}, &errYAMLLimit{fmt.Sprintf("brackets nested deeper than %d levels", MaxYAMLDepth)}
			}
		case ']', '}':
			depth = max(depth-1, 0)
		case '*':
			if i+1 < len(src) && src[i+1] != ' ' && (i == 0 || src[i-1] == ' ' || src[i-1] == '[' || src[i-1] == ',' || src[i-1] == '\t') {
				if aliases++; aliases > MaxYAMLAliases {
					return Pos{line, col}, &errYAMLLimit{fmt.Sprintf("more than %d aliases (*name): each expands a subtree", MaxYAMLAliases)}
				}
			}
		}
	}
	return Pos{}, nil
}
