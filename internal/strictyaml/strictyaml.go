// Package strictyaml is the skeleton that spillway's strict parsers of
// small YAML (or JSON) documents share: the route rules (xds/routing) and
// the per-service config (weights/svcconfig). It decodes one document into
// yaml.Node trees and checks their shape, and every refusal is an *Error
// naming the file, the line and the field path (rules[1].split[0].to), so
// an operator can find it. What a field means stays with each parser.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is a parse or validation error at a line of a document.
type Error struct {
	File  string // the file, or "body" for an API request
	Line  int    // 0 when unknown
	Field string // path of the field, e.g. "pid.kp"; "" for syntax
	Msg   string
	// Kind is what the error unwraps to: the parser's own ErrInvalid.
	Kind error
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field == "" {
		return loc + ": " + e.Msg
	}
	return loc + ": " + e.Field + ": " + e.Msg
}

// Unwrap returns Kind.
func (e *Error) Unwrap() error { return e.Kind }

// Parser checks the nodes of one document; File and Kind go into its
// errors.
type Parser struct {
	File string
	Kind error
}

// Document decodes data, at most maxBytes long, as one YAML document and
// returns its root node, or nil for an empty or null document. what names
// the document in the refusal of a second one ("the rules are one").
func (p Parser) Document(data []byte, maxBytes int, what string) (*yaml.Node, error) {
	if len(data) > maxBytes {
		return nil, &Error{File: p.File, Msg: fmt.Sprintf("%d bytes, over the limit of %d", len(data), maxBytes), Kind: p.Kind}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &Error{File: p.File, Msg: "malformed YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Kind: p.Kind}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: p.File, Line: extra.Line, Msg: "more than one YAML document; " + what, Kind: p.Kind}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if IsNull(root) {
		return nil, nil
	}
	return root, nil
}

// Errf is an *Error at n's line for field.
func (p Parser) Errf(n *yaml.Node, field, format string, args ...any) error {
	return &Error{File: p.File, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...), Kind: p.Kind}
}

// Mapping returns n's values by key. It refuses a node that is not a
// mapping, a key that is not a plain name, a key not in allowed, a key
// given twice, and aliases (as n or as a value).
func (p Parser) Mapping(n *yaml.Node, path string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind == yaml.AliasNode {
		return nil, p.Errf(n, path, "aliases are not supported")
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.Errf(n, path, "want a mapping of %s, got %s", strings.Join(allowed, ", "), Describe(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.Errf(k, path, "want a field name, got %s", Describe(k))
		}
		field := Join(path, k.Value)
		known := false
		for _, a := range allowed {
			known = known || a == k.Value
		}
		if !known {
			return nil, p.Errf(k, field, "unknown field; known are %s", strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.Errf(k, field, "set twice")
		}
		if v.Kind == yaml.AliasNode {
			return nil, p.Errf(v, field, "aliases are not supported")
		}
		out[k.Value] = v
	}
	return out, nil
}

// List returns the items of a list node.
func (p Parser) List(n *yaml.Node, field string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.Errf(n, field, "want a list, got %s", Describe(n))
	}
	return n.Content, nil
}

// Scalar returns the text of a non-null scalar (a string, number or
// boolean).
func (p Parser) Scalar(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || IsNull(n) {
		return "", p.Errf(n, field, "want a value, got %s", Describe(n))
	}
	return n.Value, nil
}

// String returns a scalar that YAML reads as a string (not a number or a
// boolean).
func (p Parser) String(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || IsNull(n) || n.Tag != "!!str" {
		return "", p.Errf(n, field, "want a string, got %s", Describe(n))
	}
	return n.Value, nil
}

// IsNull reports whether n is YAML's null (`~`, `null` or nothing).
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// Describe says what n is, for "want X, got Y".
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if IsNull(n) {
			return "null"
		}
		return strconv.Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

// Join appends key k to a field path.
func Join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
