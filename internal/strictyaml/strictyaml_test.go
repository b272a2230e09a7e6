package strictyaml

import (
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var errTest = errors.New("invalid test document")

func TestDocument(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantNil bool   // an empty or null document
		wantErr string // the whole error text
	}{
		{name: "empty", in: "", wantNil: true},
		{name: "comment_only", in: "# nothing\n", wantNil: true},
		{name: "null", in: "~\n", wantNil: true},
		{name: "mapping", in: "a: 1\n"},
		{name: "json", in: `{"a": 1}`},
		{name: "malformed", in: "a: [1\n", wantErr: "f.yaml: malformed YAML: line 1: did not find expected ',' or ']'"},
		{name: "two_documents", in: "a: 1\n---\nb: 2\n", wantErr: "f.yaml:2: more than one YAML document; the test holds one"},
		{name: "too_large", in: strings.Repeat("#", 65), wantErr: "f.yaml: 65 bytes, over the limit of 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Parser{File: "f.yaml", Kind: errTest}
			root, err := p.Document([]byte(tt.in), 64, "the test holds one")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Document = %v, want error %q", err, tt.wantErr)
				}
				if !errors.Is(err, errTest) {
					t.Errorf("error %v does not unwrap to the parser's Kind", err)
				}
				var e *Error
				if !errors.As(err, &e) || e.File != "f.yaml" {
					t.Errorf("error %#v is not an *Error of f.yaml", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Document: %v", err)
			}
			if (root == nil) != tt.wantNil {
				t.Fatalf("root = %v, want nil %t", root, tt.wantNil)
			}
			if root != nil && root.Kind != yaml.MappingNode {
				t.Errorf("root kind = %v, want the document's mapping", root.Kind)
			}
		})
	}
}

func TestChecks(t *testing.T) {
	p := Parser{File: "body", Kind: errTest}
	doc := func(t *testing.T, s string) *yaml.Node {
		t.Helper()
		root, err := p.Document([]byte(s), 1<<10, "one")
		if err != nil || root == nil {
			t.Fatalf("Document(%q) = %v, %v", s, root, err)
		}
		return root
	}
	tests := []struct {
		name    string
		in      string
		check   func(n *yaml.Node) error
		wantErr string
	}{
		{"mapping", "a: 1\nb: x\n", func(n *yaml.Node) error { _, err := p.Mapping(n, "cfg", "a", "b"); return err }, ""},
		{"unknown_field", "a: 1\nc: 2\n", func(n *yaml.Node) error { _, err := p.Mapping(n, "cfg", "a", "b"); return err },
			"body:2: cfg.c: unknown field; known are a, b"},
		{"set_twice", "a: 1\na: 2\n", func(n *yaml.Node) error { _, err := p.Mapping(n, "", "a"); return err },
			"body:2: a: set twice"},
		{"not_a_mapping", "- 1\n", func(n *yaml.Node) error { _, err := p.Mapping(n, "cfg", "a"); return err },
			"body:1: cfg: want a mapping of a, got a list"},
		{"key_not_a_name", "? [1]\n: 2\n", func(n *yaml.Node) error { _, err := p.Mapping(n, "cfg", "a"); return err },
			"body:1: cfg: want a field name, got a list"},
		{"alias_value", "a: &x 1\nb: *x\n", func(n *yaml.Node) error { _, err := p.Mapping(n, "", "a", "b"); return err },
			"body:2: b: aliases are not supported"},
		{"list", "a: [1, 2]\n", func(n *yaml.Node) error {
			m, err := p.Mapping(n, "", "a")
			if err != nil {
				return err
			}
			items, err := p.List(m["a"], "a")
			if err == nil && len(items) != 2 {
				return errors.New("want 2 items")
			}
			return err
		}, ""},
		{"list_of_null", "a: ~\n", func(n *yaml.Node) error { _, err := p.List(n.Content[1], "a"); return err },
			"body:1: a: want a list, got null"},
		{"scalar_number", "a: 7\n", func(n *yaml.Node) error { _, err := p.Scalar(n.Content[1], "a"); return err }, ""},
		{"scalar_of_mapping", "a: {b: 1}\n", func(n *yaml.Node) error { _, err := p.Scalar(n.Content[1], "a"); return err },
			"body:1: a: want a value, got a mapping"},
		{"string", "a: x\n", func(n *yaml.Node) error { _, err := p.String(n.Content[1], "a"); return err }, ""},
		{"string_of_number", "a: 7\n", func(n *yaml.Node) error { _, err := p.String(n.Content[1], "a"); return err },
			`body:1: a: want a string, got "7"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check(doc(t, tt.in))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("got %v, want %q", err, tt.wantErr)
			case tt.wantErr != "" && !errors.Is(err, errTest):
				t.Errorf("%v does not unwrap to the parser's Kind", err)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	for _, c := range [][3]string{{"", "a", "a"}, {"a", "b", "a.b"}, {"a[0]", "b", "a[0].b"}} {
		if got := Join(c[0], c[1]); got != c[2] {
			t.Errorf("Join(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

// FuzzDocument: any input decodes to a root, nil, or an *Error that
// unwraps to the parser's Kind and names the file; walking every mapping
// with Mapping never panics.
func FuzzDocument(f *testing.F) {
	for _, s := range []string{"", "a: 1", "a: [1, 2]\nb: {c: x}", "a: &x 1\nb: *x", "---\n---", "? [1]\n: 2", "{"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := Parser{File: "fuzz", Kind: errTest}
		root, err := p.Document(data, 4<<10, "one")
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.File != "fuzz" || !errors.Is(err, errTest) {
				t.Fatalf("error %#v: want an *Error of file fuzz unwrapping to Kind", err)
			}
			return
		}
		var walk func(n *yaml.Node, depth int)
		walk = func(n *yaml.Node, depth int) {
			if n == nil || depth > 20 {
				return
			}
			if n.Kind == yaml.MappingNode {
				var keys []string
				for i := 0; i+1 < len(n.Content); i += 2 {
					keys = append(keys, n.Content[i].Value)
				}
				if _, err := p.Mapping(n, "x", keys...); err != nil && !errors.Is(err, errTest) {
					t.Fatalf("Mapping error %v does not unwrap to Kind", err)
				}
			}
			for _, c := range n.Content {
				walk(c, depth+1)
			}
		}
		walk(root, 0)
	})
}
