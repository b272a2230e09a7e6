package propagate_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocsRouting: the Go code in docs/routing.md's section "Carrying a
// traffic class through the call chain" is code of Example_callChain
// (example_test.go), which compiles with the tests, so the doc cannot
// drift from the API.
func TestDocsRouting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Carrying a traffic class through the call chain")
	if !ok {
		t.Fatal(`docs/routing.md has no "## Carrying a traffic class through the call chain" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	// A block is the example's top-level code as it is, or its lines with
	// one level of indentation removed (the body of Example_callChain).
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	example := strings.Join(lines, "\n")
	n := 0
	for rest := section; ; n++ {
		_, after, ok := strings.Cut(rest, "```go\n")
		if !ok {
			break
		}
		block, tail, _ := strings.Cut(after, "```")
		if !strings.Contains(example, block) && !strings.Contains(string(src), block) {
			t.Errorf("go block %d of the section is not in example_test.go:\n%s", n, block)
		}
		rest = tail
	}
	if n != 2 {
		t.Errorf("found %d go blocks in the section, want 2", n)
	}
}
