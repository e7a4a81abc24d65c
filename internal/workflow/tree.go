package workflow

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
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

func posOf(tk *token.Token) Pos {
	if tk == nil || tk.Position == nil {
		return Pos{1, 1}
	}
	return Pos{tk.Position.Line, tk.Position.Column}
}

// parseTree parses YAML text into a tree. A parse failure returns the position of the error
// when the parser gives one.
func parseTree(src []byte) (root *node, at Pos, err error) {
	defer func() { // goccy/go-yaml panics on some malformed input (see auth.decodeYAML)
		if r := recover(); r != nil {
			root, at, err = nil, Pos{1, 1}, fmt.Errorf("malformed YAML: %v", r)
		}
	}()
	if at, lerr := yamlLimits(src); lerr != nil {
		return nil, at, lerr
	}
	f, perr := parser.ParseBytes(src, 0)
	if perr != nil {
		at = Pos{1, 1}
		if e, ok := perr.(interface{ GetToken() *token.Token }); ok {
			at = posOf(e.GetToken())
		}
		return nil, at, perr
	}
	if len(f.Docs) == 0 || f.Docs[0] == nil || f.Docs[0].Body == nil {
		return &node{kind: kindNull, pos: Pos{1, 1}}, Pos{}, nil
	}
	if len(f.Docs) > 1 {
		return nil, posOf(f.Docs[1].GetToken()), fmt.Errorf("the file holds %d YAML documents; one workflow per file", len(f.Docs))
	}
	return convert(f.Docs[0].Body, 0), Pos{}, nil
}

func convert(n ast.Node, depth int) *node {
	if n == nil {
		return &node{kind: kindNull, pos: Pos{1, 1}}
	}
	if depth > 100 {
		return &node{kind: kindScalar, typ: "str", pos: posOf(n.GetToken())}
	}
	switch v := n.(type) {
	case *ast.MappingNode:
		out := &node{kind: kindMap, pos: posOf(v.GetToken())}
		for _, mv := range v.Values {
			out.fields = append(out.fields, convertField(mv, depth))
		}
		if len(out.fields) > 0 {
			out.pos = out.fields[0].keyPos
		}
		return out
	case *ast.MappingValueNode:
		f := convertField(v, depth)
		return &node{kind: kindMap, pos: f.keyPos, fields: []field{f}}
	case *ast.SequenceNode:
		out := &node{kind: kindSeq, pos: posOf(v.GetToken())}
		for _, it := range v.Values {
			out.items = append(out.items, convert(it, depth+1))
		}
		return out
	case *ast.NullNode:
		return &node{kind: kindNull, pos: posOf(v.GetToken())}
	case *ast.StringNode:
		return &node{kind: kindScalar, typ: "str", text: v.Value, pos: posOf(v.GetToken())}
	case *ast.LiteralNode:
		s := ""
		if v.Value != nil {
			s = v.Value.Value
		}
		return &node{kind: kindScalar, typ: "str", text: s, pos: posOf(v.GetToken())}
	case *ast.IntegerNode:
		return &node{kind: kindScalar, typ: "int", text: v.GetToken().Value, pos: posOf(v.GetToken())}
	case *ast.FloatNode:
		return &node{kind: kindScalar, typ: "float", text: v.GetToken().Value, pos: posOf(v.GetToken())}
	case *ast.BoolNode:
		return &node{kind: kindScalar, typ: "bool", text: strings.ToLower(v.GetToken().Value), pos: posOf(v.GetToken())}
	case *ast.TagNode:
		return convert(v.Value, depth+1)
	case *ast.AnchorNode:
		return convert(v.Value, depth+1)
	default: // aliases, infinity, NaN and the like: kept as text
		return &node{kind: kindScalar, typ: "str", text: n.GetToken().Value, pos: posOf(n.GetToken())}
	}
}

func convertField(mv *ast.MappingValueNode, depth int) field {
	f := field{keyPos: posOf(mv.GetToken())}
	if mv.Key != nil {
		f.key = mv.Key.GetToken().Value
		f.keyPos = posOf(mv.Key.GetToken())
	}
	f.value = convert(mv.Value, depth+1)
	if f.value.kind == kindNull && mv.Value == nil {
		f.value.pos = f.keyPos
	}
	return f
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
